// The steps of the partition pass, which partitionGraph (passes/partition.cpp) runs in order:
//   1. hoistAttributesAndConstants (hoist.cpp): takes the inlined graph; moves GetAttr chains and
//      constants to its front. listTopLevel (cuts.cpp) then numbers the nodes after them.
//   2. findCandidateCuts (cuts.cpp): takes the top-level nodes; returns the cuts that carry the
//      fewest tensors, each marked when a later node writes its boundary in place.
//   3-4. chooseCuts (choose_cuts.cpp): takes the candidates; returns the chain's boundaries: one
//      cut per gap between heavy ops, balanced down to max_stages, or a single stage.
//   5. buildStages (stages.cpp): takes the boundaries; fills the Partition with the region, the
//      lifted inputs and one standalone graph per stage; labelStagesByModule (labels.cpp) names
//      the stages after the modules whose parameters they read.
// Internal to the pass: include passes/partition.h instead.
#pragma once

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/ir.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "passes/partition.h"

namespace jitckpt::partition_steps {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

inline bool isTensor(const Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; }

// Heavy ops (convolution, linear, matmul, embedding, RNNs, attention, einsum, or a node with one
// in a nested block) carry the compute and the parameters of a layer; norms, activations and
// pooling are not heavy.
bool isHeavyOp(const Node* n);

// ---- 1. Hoist (hoist.cpp) ----

// Moves every prim::GetAttr chain from `self` (in nested blocks too) and every top-level constant
// to the front of `graph`, in dependency order. Attribute values become the chain's lifted
// inputs; constants are cloned into the stages that use them. Throws when `graph` has no inputs,
// is not inlined, or assigns an attribute (prim::SetAttr).
void hoistAttributesAndConstants(Graph& graph);

// Attribute path of a GetAttr chain: "layer1.0.bn1.weight".
std::string attributePath(const Value* v);
// Parameter, buffer, or scalar (non-tensor, or an Optional[Tensor] attribute that is no buffer).
LiftedKind attributeKind(const Value* v);

// ---- Top-level positions (cuts.cpp) ----

// The top-level nodes after the hoisted prefix. Position p is the gap before nodes[p]; `end`
// (nodes.size()) is the position of the return node. Nested blocks are never split: a node with
// blocks is one position.
struct TopLevelNodes {
  Graph* graph = nullptr;
  torch::jit::Block* block = nullptr;  // graph->block()
  Value* self = nullptr;               // graph input 0
  std::vector<Node*> nodes;
  std::unordered_map<const Node*, size_t> index;  // position of each node in `nodes`
  size_t end = 0;
  // The values that can cross cuts (graph inputs but `self`, then top-level node outputs) and, for
  // each, [definedAt, lastUse] (0 as last use when unused).
  std::vector<Value*> values;
  std::vector<std::pair<size_t, size_t>> ranges;

  // `self`, or a GetAttr or constant of the hoisted prefix.
  bool isHoisted(const Value* v) const;
  // Last top-level position that uses `v` (end for the return node).
  size_t lastUse(const Value* v) const;
  // Graph inputs at 0 (before nodes[0]), node outputs at their node's position + 1.
  size_t definedAt(const Value* v) const;
};

// Call after hoistAttributesAndConstants.
TopLevelNodes listTopLevel(Graph& graph);

// ---- 2. Candidate cuts (cuts.cpp) ----

struct Cut {
  size_t position;             // index into `nodes`: the cut is before nodes[position]
  std::vector<Value*> live;    // boundary tensors, in a stable order
  bool written_later = false;  // a later node writes a boundary tensor in place
};

struct CandidateCuts {
  std::vector<Cut> cuts;  // by position; never empty
  size_t fewest = 0;      // the tensor count that the inner cuts carry
};

// A position is a valid cut when every value live across it (defined before, used after) is a
// tensor, apart from lifted values and immutable scalars defined before the chain, which starts
// at the first valid cut. Only cuts carrying the fewest tensors are kept (one in CNNs, so never
// inside a residual block where the identity is live too; the mask and the hidden state in
// transformers). Writes are judged with AliasDb in the method graph (see writesToActivation).
// Throws when no position has only tensors live.
CandidateCuts findCandidateCuts(const TopLevelNodes& top, const torch::jit::AliasDb& alias_db);

// ---- 3-4. Choose cuts (choose_cuts.cpp) ----

// Heavy ops before each position: before[p] counts those in nodes[0, p).
struct HeavyOpCounts {
  std::vector<int> before;
  int between(size_t a, size_t b) const { return before[b] - before[a]; }
};
HeavyOpCounts countHeavyOps(const TopLevelNodes& top);

// Returns the chain's boundaries, the first and last candidates included. 3. Granularity: a stage
// holds at least one heavy op, and at most one cut sits in each gap between two consecutive heavy
// ops: the latest one, so the norm, activation and pooling after a layer stay in its stage (in a
// ResNet, one stage per residual block plus the stem and the classifier). With
// move_cuts_off_inplace_writes, the latest cut of the gap whose boundary nothing writes in place
// when there is one; otherwise the writing stage gets marked (step 5).
// 4. `max_stages` then keeps the cuts that best balance the heavy-op count. With no usable cut the
// whole region is one stage and a warning goes to `warnings`; throws when it is empty.
std::vector<const Cut*> chooseCuts(const CandidateCuts& candidates, const HeavyOpCounts& heavy,
                                   const PartitionOptions& options,
                                   std::vector<std::string>& warnings);

// ---- 5. Stages (stages.cpp, labels.cpp) ----

// Fills partition's region, chain inputs and outputs, lifted inputs (every hoisted attribute or
// prologue scalar that a stage reads, in first-read order) and stages, one per pair of
// consecutive boundaries in `chosen`. A stage that writes an activation input in place is marked
// writes_activation_input, so the runtime copies its input and the stored checkpoint stays
// intact; attributes it writes (BatchNorm statistics) go to mutated_lifted. A boundary tensor that
// is a view of an earlier, otherwise dead tensor is kept as is (its checkpoint keeps the base
// alive, so its size is a lower bound); two aliasing boundary tensors are each counted. Labels
// fall back to the stage's first heavy op.
void buildStages(Partition& partition, const TopLevelNodes& top,
                 const std::vector<const Cut*>& chosen, const torch::jit::AliasDb& alias_db);

// Stage labels from the modules whose parameters a stage reads: their common attribute path
// ("layer1.0" for a ResNet block), or, when that path is empty or not unique to the stage
// (DenseNet's "features"), the range of its children that the stage covers
// ("features.denseblock1..transition1", "conv1..bn1" for a ResNet stem).
void labelStagesByModule(Partition& partition);

// ---- In-place writes (writes.cpp) ----

// Inputs that a node writes in place: arguments annotated (a!) in its schema, and the running
// statistics of the norm ops, which write them without saying so in their schema.
std::vector<size_t> directlyWrittenInputs(const Node* n);

// Whether `n` or a node nested in it writes in place a tensor that may alias one of `values`
// (through a view or alias too). Writes to attributes are left out; see writes.cpp.
bool writesToActivation(Node* n, const torch::jit::ValueSet& values,
                        const torch::jit::AliasDb& alias_db);

}  // namespace jitckpt::partition_steps
