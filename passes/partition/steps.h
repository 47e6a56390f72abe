// The steps of the partition pass, in the order partitionGraph (partition.cpp) runs them:
//   1. hoistAttributesAndConstants (hoist.cpp): takes the inlined graph; moves GetAttr chains and
//      constants to its front.
//   2. splitMixedIfs (side.cpp): splits an If that yields tensors and flags in two.
//   3. sinkTensorLists (sink_lists.cpp): moves tensor lists to their first use.
//   4. hoistSideComputations (side.cpp): moves after the constants what does not read the main
//      inputs' data (masks, position ids).
//   5. carryScalarsAsTensors (scalar_carriers.cpp): flags read layers later cross cuts as tensors.
//   6. listTopLevel (cuts.cpp): numbers the top-level nodes after the moved prefix.
//   7. findCandidateCuts (cuts.cpp): takes the top-level nodes; returns every valid cut with the
//      boundary tensors it carries and their bytes, each marked when a later node writes its
//      boundary in place; none that carries an alias of a buffer that a later node writes.
//   8. chooseCuts (choose_cuts.cpp): takes the candidates; returns the chain's boundaries: the
//      cheapest cut per gap between heavy ops (with every_cut, each that carries new tensors),
//      without cuts that carry much more than their neighbours, balanced down to max_stages, or
//      a single stage.
//   9. buildStages (stages.cpp): takes the boundaries; fills the Partition with the region, the
//      lifted inputs and one standalone graph per stage.
//  10. labelStagesByModule (labels.cpp): names the stages after the modules whose parameters
//      they read.
// Internal to the pass: include passes/partition/partition.h instead.
#pragma once

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "passes/partition/partition.h"
#include "runtime/stages.h"  // directlyWrittenInputs

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

// ---- 2 and 4. Side computations (side.cpp) ----

// Whether values of `type` can hold tensors (Tensor, Optional[Tensor], List[Tensor], tuples).
bool containsTensor(const c10::TypePtr& type);

// Splits each pure top-level If that yields both tensors and other values (flags, optional masks)
// in two, one per kind, each with only the code its outputs need, so that the second may move
// before the chain (nn.TransformerEncoder's padding-mask preparation yields the mask for its
// layers together with the converted input). Runs before AliasDb is built.
void splitMixedIfs(Graph& graph);

// The main inputs are the graph inputs whose data reaches the first heavy op that reads any
// input's data (the image, the token ids). Moves, in order, the top-level nodes that can run before
// the chain because they read no main input's data (only shapes, attributes, constants, other
// inputs and values so moved: a causal mask, position ids and their embedding, a canonical padding
// mask) to just after the hoisted prefix; never random ops, writes, or reads of values written in
// place. Returns how many moved (listTopLevel's first positions).
size_t hoistSideComputations(Graph& graph, const torch::jit::AliasDb& alias_db);

// ---- 3. Tensor lists (sink_lists.cpp) ----

// Moves each top-level ListConstruct of tensors to just before the top-level node that first uses
// the list: a list made where forward starts and filled by appends as the layers run (outputs
// collected for a List[Tensor] return) would otherwise be live from the start, where no cut may
// carry it, and leave no place for the chain to begin. Returns how many moved.
size_t sinkTensorLists(Graph& graph);

// ---- 5. Scalars carried as tensors (scalar_carriers.cpp) ----

// Each bool, int, float or Scalar (`.item()`) that a top-level node after the first
// `num_side_nodes` computes and that is read past a heavy op crosses cuts as a 0-dim CPU tensor
// instead, made right after it and read back right before each top-level node that reads it, so
// that cuts between layers stay valid where forward derives a flag from an activation
// (nn.TransformerDecoder's tgt_is_causal on PyTorch 2.x, read by every layer). Returns the
// carriers (AliasDb must be built after, when any).
std::unordered_set<const Value*> carryScalarsAsTensors(Graph& graph, size_t num_side_nodes);

// ---- 6. Top-level positions (cuts.cpp) ----

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
  // Positions before chain_begin hold the side computations; the chain starts at or after it.
  size_t chain_begin = 0;
  // Values that carry the main inputs' data (see hoistSideComputations). A tensor defined before
  // the chain that is not one of them is a side value: handed to the stages that read it, never
  // part of a boundary.
  std::unordered_set<const Value*> from_main;
  // The 0-dim tensors that carry flags and numbers (carryScalarsAsTensors): no unit of a
  // boundary's tensor count.
  std::unordered_set<const Value*> carried_flags;

  // `self`, or a GetAttr or constant of the hoisted prefix.
  bool isHoisted(const Value* v) const;
  // Last top-level position that uses `v` (end for the return node).
  size_t lastUse(const Value* v) const;
  // Graph inputs at 0 (before nodes[0]), node outputs at their node's position + 1.
  size_t definedAt(const Value* v) const;
};

// The top-level nodes after the hoisted GetAttr/Constant prefix, in order.
std::vector<Node*> nodesAfterHoistedPrefix(Graph& graph);

// The top-level node that contains `n` (itself when top-level).
Node* topLevelOwner(Node* n, const torch::jit::Block* top);

// Call after hoistAttributesAndConstants; `num_side_nodes` from hoistSideComputations,
// `carried_flags` from carryScalarsAsTensors.
TopLevelNodes listTopLevel(Graph& graph, size_t num_side_nodes = 0,
                           std::unordered_set<const Value*> carried_flags = {});

// The values of `top` that carry the main inputs' data (side.cpp).
std::unordered_set<const Value*> valuesFromMainInputs(const TopLevelNodes& top);

// ---- 7. Candidate cuts (cuts.cpp) ----

// A tensor list live across a cut (DenseNet's features): the cut carries its elements, and the
// stage after it builds the list again from them.
struct ListBoundary {
  Value* list;
  std::vector<Value*> elements;  // the list's contents at the cut, in order
};

struct Cut {
  size_t position;             // index into `nodes`: the cut is before nodes[position]
  std::vector<Value*> live;    // boundary tensors, in a stable order (list elements included)
  int64_t bytes = 0;           // what they hold (ValueBytes; one unit per tensor without sizes)
  bool written_later = false;  // a later node writes a boundary tensor in place
  std::vector<ListBoundary> lists;
};

struct CandidateCuts {
  std::vector<Cut> cuts;  // by position; never empty
};

// A position is a valid cut when every value live across it (defined before, used after) is a
// tensor, apart from values defined before the chain, which starts at the first valid cut at or
// after chain_begin, or later where that lifts a value that blocks cuts and separates more heavy
// ops (bestValidCuts in cuts.cpp says when): side tensors (not from the main inputs) and
// non-tensors that nothing writes (scalars, Optional[Tensor], lists of ints) are lifted, not
// carried. Carriers (carryScalarsAsTensors) count for no bytes and no tensor. Inside the chain, a
// tensor list built by a top-level ListConstruct and changed only by top-level appends is carried
// as its elements at the cut (the first and last cut carry no list). Writes are judged with AliasDb
// in the method graph (see writesToActivation). Throws when no position has only tensors live.
CandidateCuts findCandidateCuts(const TopLevelNodes& top, const torch::jit::AliasDb& alias_db,
                                const ValueBytes& bytes);

// ---- 8. Choose cuts (choose_cuts.cpp) ----

// Heavy ops before each position: before[p] counts those in nodes[0, p).
struct HeavyOpCounts {
  std::vector<int> before;
  int between(size_t a, size_t b) const { return before[b] - before[a]; }
};
HeavyOpCounts countHeavyOps(const TopLevelNodes& top);

// Returns the chain's boundaries, the first and last candidates included. Granularity: a stage
// holds at least one heavy op (not so with every_cut), and one cut sits in each gap between two
// consecutive heavy ops: the one carrying the fewest bytes, the latest of equals, so the norm,
// activation and pooling after a layer stay in its stage. With every_cut, so does each other cut of
// the gap that carries tensors the next one does not and (with move_cuts_off_inplace_writes) is not
// written in place later. With move_cuts_off_inplace_writes, a boundary that a later node writes in
// place counts twice (the runtime copies it); otherwise the writing stage gets marked (step 9).
// Then runs of equal cuts that carry on a tensor of the cut before them and kHumpRatio times what
// both neighbours carry are dropped, until none is left: in a ResNet the cuts inside a residual
// block (identity and branch) go, leaving one stage per block; in a transformer block those beside
// the attention scores go, leaving the residual stream; the skips of a U-Net grow slowly from cut
// to cut and stay. `max_stages` then keeps the cuts that best balance the heavy-op count. With no
// usable cut the whole region is one stage and a warning goes to `warnings`; throws when it is
// empty.
std::vector<const Cut*> chooseCuts(const TopLevelNodes& top, const CandidateCuts& candidates,
                                   const HeavyOpCounts& heavy, const PartitionOptions& options,
                                   std::vector<std::string>& warnings);

// ---- 9 and 10. Stages (stages.cpp, labels.cpp) ----

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

// The value whose storage `v` is: `v` followed back through unchecked casts and outputs that
// alias an input (views such as select, slice and view; in-place ops returning self). A write to
// `self.buf[1]` or `self.buf.view(-1)` writes `self.buf`.
Value* aliasBase(Value* v);

// Whether `n` or a node nested in it writes in place a tensor that may alias one of `values`
// (through a view or alias too). Writes to attributes are left out; see writes.cpp.
bool writesToActivation(Node* n, const torch::jit::ValueSet& values, const TopLevelNodes& top,
                        const torch::jit::AliasDb& alias_db);

// Whether `n` (a node without blocks) writes in place storage that `v` may hold. Storage that an
// op made after `v` was defined (zeros_like, reached back through views and ops that return
// their input), and an attribute's where `v` is an argument of forward, is not `v`'s, whatever
// AliasDb's wildcard sets say (see writes.cpp).
bool writesToValue(const Node* n, const Value* v, const TopLevelNodes& top,
                   const torch::jit::AliasDb& alias_db);

// The last top-level node at or after `from` that writes each attribute in place (a buffer: an
// average of activations), by attribute path (each read of `self.ema` is a GetAttr of its own).
std::unordered_map<std::string, size_t> lastAttributeWrites(const TopLevelNodes& top, size_t from);

// Whether `cut` carries an alias of such an attribute (a view of it, the result of an in-place
// op on it) that a node after the cut writes: a checkpoint of it would change under the stage
// that holds it. findCandidateCuts keeps no such cut. A stage that reads the attribute itself
// before a later stage writes it is safe: recomputations read what the first run read.
bool carriesWrittenAttribute(const Cut& cut,
                             const std::unordered_map<std::string, size_t>& last_write);

}  // namespace jitckpt::partition_steps
