// Partition pass: takes a scripted module's inlined `forward` graph; returns the chain of stages
// the solver works on (each a standalone Graph), the lifted inputs the stages read, and the region
// of the method graph that the chain replaces. Prologue and epilogue stay in the method graph.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/stages.h"

namespace jitckpt {

struct LiftedInput {
  torch::jit::Value* value;  // in Partition::graph, defined before the chain region
  std::string name;          // attribute path such as "layer1.0.bn1.running_mean", or "training"
  LiftedKind kind;
};

struct Stage {
  // Inputs: the activation inputs (boundary tensors) first, then one input per entry of `lifted`.
  // Outputs: the activations of the next boundary. Runs alone given its inputs.
  std::shared_ptr<torch::jit::Graph> graph;
  size_t num_activation_inputs = 0;
  std::vector<size_t>
      lifted;  // graph input num_activation_inputs+k is Partition::lifted[lifted[k]]
  std::vector<size_t>
      mutated_lifted;  // indices into Partition::lifted that the stage writes in place
  bool writes_activation_input = false;  // writes an activation input in place: protect checkpoints
  std::string label;                     // short description for printing, e.g. "layer1.0"
};

// A tensor list that crosses the chain's last boundary (outputs collected by append for a
// List[Tensor] return): carried as its elements, and built again after the chain.
struct ListOutput {
  torch::jit::Value* list;
  std::vector<torch::jit::Value*> elements;  // each among chain_outputs, in list order
};

struct Partition {
  // The inlined method graph that owns the chain region; GetAttr chains and constants that the
  // chain reads are hoisted before the region.
  std::shared_ptr<torch::jit::Graph> graph;
  // The chain region: the contiguous nodes [first_node, last_node] of graph->block().
  torch::jit::Node* first_node = nullptr;
  torch::jit::Node* last_node = nullptr;
  std::vector<torch::jit::Value*> chain_inputs;   // tensors of boundary 0, in graph
  std::vector<torch::jit::Value*> chain_outputs;  // tensors of the last boundary, in graph
  std::vector<ListOutput> chain_output_lists;     // lists of the last boundary
  std::vector<LiftedInput> lifted;
  std::vector<Stage> stages;
  // What each boundary 0..L carries: bytes measured on example inputs, or (bytes_measured false)
  // its tensor count.
  std::vector<int64_t> boundary_bytes;
  bool bytes_measured = false;
  std::vector<std::string> warnings;  // e.g. why there is only one stage
  // The inlined forward before the partition's edits (hoisting, flags carried as tensors), to cut
  // again (recut.h); partitionClone sets it.
  std::shared_ptr<torch::jit::Graph> original_forward;
  // The forward as the user's module had it, calls not inlined, for jitckpt.strip: the copy a
  // saved module carries (an inlined one is the whole model's code in one method, which
  // TorchScript takes seconds per thousand lines to compile again when it loads the file).
  // partitionClone sets it.
  std::shared_ptr<torch::jit::Graph> user_forward;
};

// Bytes of the top-level tensors of a graph, measured on example inputs (measureValueBytes, in
// value_bytes.h): the partition chooses cuts by the bytes they carry. Without them each tensor
// counts as one unit.
using ValueBytes = std::unordered_map<const torch::jit::Value*, int64_t>;

struct PartitionOptions {
  int max_stages = 0;  // 0: no limit beyond the merge of tiny stages
  // Move a cut off a boundary that a later node writes in place (relu_, add_) when another cut can
  // take its place; when false (or impossible) the writing stage is marked instead.
  bool move_cuts_off_inplace_writes = true;
  // Offer the solver every cut of a gap between heavy ops that carries a new set of tensors (a
  // stem's convolution, norm and pooling apart), not only the cheapest: finer stages, more to
  // profile. Lowers the smallest limit where a gap's own backward bounds it (DenseNet).
  bool every_cut = false;
  // TORCH_WARN each of Partition::warnings, for every model they apply to (not once per process;
  // Python's filter drops repeats). The recut, whose rewrite warned already, does not.
  bool warn = true;
};

// Attribute paths ("head.weight") of the tensors that the epilogue (the nodes after the chain
// region, nested blocks included) reads. The gradients of such parameters are made before the
// chain's backward starts and held through it.
std::vector<std::string> epilogueAttributePaths(const Partition& partition);

// ... that the prologue (the nodes before the chain region) reads. Gradients of such parameters
// that the chain does not read are made after the chain's backward ends.
std::vector<std::string> prologueAttributePaths(const Partition& partition);

// `graph` must be inlined (no prim::CallMethod / CallFunction); it is taken over, not copied.
Partition partitionGraph(std::shared_ptr<torch::jit::Graph> graph,
                         const PartitionOptions& options = {}, const ValueBytes& bytes = {});

// The graph as the partition edited it, and its partition by tensor count, cut when first asked
// for (a measurement on example inputs needs only the graph).
class CountCut {
 public:
  CountCut(std::shared_ptr<torch::jit::Graph> graph, std::function<Partition()> cut)
      : graph_(std::move(graph)), cut_(std::move(cut)) {}
  const std::shared_ptr<torch::jit::Graph>& graph() const { return graph_; }
  const Partition& partition() const {
    if (!partition_) partition_ = cut_();
    return *partition_;
  }
  Partition take() && {
    partition();
    return std::move(*partition_);
  }

 private:
  std::shared_ptr<torch::jit::Graph> graph_;
  std::function<Partition()> cut_;
  mutable std::optional<Partition> partition_;
};

// Bytes of the tensors of `counted.graph()`.
using MeasureBytes = std::function<ValueBytes(const CountCut& counted)>;

// Prepares `graph` for cutting, hands it to `measure`, and cuts it by the bytes that returns (by
// tensor count when it returns none). The region, its inputs, outputs and lifted values do not
// depend on bytes: the partitions by count and by bytes have the same.
Partition partitionGraphMeasured(std::shared_ptr<torch::jit::Graph> graph,
                                 const PartitionOptions& options, const MeasureBytes& measure);

}  // namespace jitckpt
