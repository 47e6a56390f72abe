// Step 2 of the partition pass: the top-level positions and the candidate cuts between them.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "passes/partition/steps.h"

namespace jitckpt::partition_steps {
namespace {

namespace prim = c10::prim;

// Immutable non-tensor values that can be handed to the chain op as lifted scalars.
bool isImmutableScalar(const Value* v) {
  switch (v->type()->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::NoneType:
    case c10::TypeKind::DeviceObjType:
      return true;
    default:
      return false;
  }
}

// The top-level node that contains `n` (itself when top-level).
Node* topLevelOwner(Node* n, const torch::jit::Block* top) {
  while (n->owningBlock() != top) n = n->owningBlock()->owningNode();
  return n;
}

// A value crosses the cut before nodes[pos] when it is defined at or before pos and used by
// nodes[pos] or later. The chain starts at the first position where only tensors and immutable
// scalars cross; scalars defined by then are lifted, and any other non-tensor makes a cut
// invalid.
std::vector<Cut> validCuts(const TopLevelNodes& top) {
  std::vector<Cut> cuts;
  std::optional<size_t> chain_start;
  for (size_t pos = 0; pos <= top.end; ++pos) {
    Cut cut{pos, {}, false};
    bool valid = true;
    for (size_t k = 0; k < top.values.size() && valid; ++k) {
      Value* v = top.values[k];
      const auto& range = top.ranges[k];
      if (v->uses().empty() || top.isHoisted(v)) continue;
      if (!(range.first <= pos && pos <= range.second)) continue;
      if (isTensor(v)) {
        cut.live.push_back(v);
      } else if (!isImmutableScalar(v) || (chain_start && range.first > *chain_start)) {
        valid = false;
      }
    }
    if (!valid || cut.live.empty()) continue;
    if (!chain_start) chain_start = pos;
    cuts.push_back(std::move(cut));
  }
  return cuts;
}

// The fewest tensors a cut carries, counted over the inner cuts: the ends may carry fewer (a mask
// dropped at the end) or more (two inputs merged by the first op).
size_t fewestTensors(const std::vector<Cut>& cuts) {
  size_t fewest = SIZE_MAX;
  for (size_t k = 1; k + 1 < cuts.size(); ++k) fewest = std::min(fewest, cuts[k].live.size());
  if (fewest == SIZE_MAX) {
    for (const Cut& c : cuts) fewest = std::min(fewest, c.live.size());
  }
  return fewest;
}

}  // namespace

bool TopLevelNodes::isHoisted(const Value* v) const {
  return v == self ||
         ((v->node()->kind() == prim::GetAttr || v->node()->kind() == prim::Constant) &&
          v->node()->owningBlock() == block && !index.count(v->node()));
}

size_t TopLevelNodes::lastUse(const Value* v) const {
  size_t last = 0;
  for (const auto& use : v->uses()) {
    Node* owner = topLevelOwner(use.user, block);
    last = std::max(last, owner == block->return_node() ? end : index.at(owner));
  }
  return last;
}

size_t TopLevelNodes::definedAt(const Value* v) const {
  return v->node() == graph->param_node() ? 0 : index.at(v->node()) + 1;
}

TopLevelNodes listTopLevel(Graph& graph) {
  TopLevelNodes top;
  top.graph = &graph;
  top.block = graph.block();
  top.self = graph.inputs()[0];
  bool in_prefix = true;  // the hoisted GetAttr/Constant prefix
  for (Node* n : top.block->nodes()) {
    if (in_prefix && (n->kind() == prim::GetAttr || n->kind() == prim::Constant)) continue;
    in_prefix = false;
    top.nodes.push_back(n);
  }
  for (size_t i = 0; i < top.nodes.size(); ++i) top.index[top.nodes[i]] = i;
  top.end = top.nodes.size();

  for (Value* v : graph.inputs()) {
    if (v != top.self) top.values.push_back(v);
  }
  for (Node* n : top.nodes) {
    for (Value* v : n->outputs()) top.values.push_back(v);
  }
  for (Value* v : top.values) {
    top.ranges.push_back({top.definedAt(v), v->uses().empty() ? 0 : top.lastUse(v)});
  }
  return top;
}

CandidateCuts findCandidateCuts(const TopLevelNodes& top, const torch::jit::AliasDb& alias_db) {
  CandidateCuts candidates;
  std::vector<Cut> cuts = validCuts(top);
  candidates.fewest = fewestTensors(cuts);
  for (Cut& c : cuts) {
    if (c.live.size() <= candidates.fewest) candidates.cuts.push_back(std::move(c));
  }
  for (Cut& c : candidates.cuts) {
    for (size_t i = c.position; i < top.end && !c.written_later; ++i) {
      c.written_later = writesToActivation(
          top.nodes[i], torch::jit::ValueSet(c.live.begin(), c.live.end()), alias_db);
    }
  }
  TORCH_CHECK(!candidates.cuts.empty(),
              "partition: no position in forward has only tensors live; "
              "jitckpt needs a tensor flowing through the model");
  return candidates;
}

}  // namespace jitckpt::partition_steps
