// Steps 6 and 7 of the partition pass: the top-level positions and the candidate cuts between them.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "passes/graph_walk.h"
#include "passes/partition/steps.h"

namespace jitckpt::partition_steps {
namespace {

namespace prim = c10::prim;

// Immutable non-tensor values that can be handed to the chain op as lifted scalars.
bool isImmutableScalar(const c10::TypePtr& type) {
  switch (type->kind()) {
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

// Whether a node after `v`'s definition writes to `v` or to an alias of it (to the end of the
// graph: the chain's backward reads lifted values after the epilogue). AliasDb::hasWriters alone
// also counts writes to storage made later that AliasDb's wildcard sets confuse with `v`: on
// PyTorch 2.x every nn.TransformerEncoderLayer builds its own padding mask as
// zeros_like(mask).masked_fill_(mask, -inf), which left the whole encoder in one stage.
// Cached: bestValidCuts asks about the same values for every start it tries.
class WrittenAfterDefinition {
 public:
  WrittenAfterDefinition(const TopLevelNodes& top, const torch::jit::AliasDb& alias_db)
      : top_(top), alias_db_(alias_db) {}
  bool operator()(Value* v) {
    if (!alias_db_.hasWriters(v)) return false;
    auto cached = cache_.find(v);
    if (cached != cache_.end()) return cached->second;
    bool written = false;
    for (size_t i = top_.definedAt(v); i < top_.nodes.size() && !written; ++i) {
      forEachNestedNode(top_.nodes[i], [&](Node* n) {
        written = written || (n->blocks().empty() && writesToValue(n, v, top_, alias_db_));
      });
    }
    return cache_.emplace(v, written).first->second;
  }

 private:
  const TopLevelNodes& top_;
  const torch::jit::AliasDb& alias_db_;
  std::unordered_map<const Value*, bool> cache_;
};

// Non-tensor values defined before the chain that the op can take as lifted scalars: immutable
// scalars, and Optional, List and Tuple of them or of tensors (a padding mask that may be None,
// a shape) that nothing writes once they are defined.
bool isLiftableBeforeChain(Value* v, WrittenAfterDefinition& written) {
  std::function<bool(const c10::TypePtr&)> liftable = [&](const c10::TypePtr& type) {
    if (isImmutableScalar(type) || type->kind() == c10::TypeKind::TensorType) return true;
    const auto kind = type->kind();
    if (kind != c10::TypeKind::OptionalType && kind != c10::TypeKind::ListType &&
        kind != c10::TypeKind::TupleType)
      return false;
    for (const auto& contained : type->containedTypes()) {
      if (!liftable(contained)) return false;
    }
    return true;
  };
  return liftable(v->type()) && !written(v);
}

// Tensor lists whose contents are known at every position: built by a top-level ListConstruct
// and changed only by top-level appends (DenseNet's features), their elements computed at the top
// level. Any other write to the list, or to an alias of it, leaves its contents unknown.
class TrackedLists {
 public:
  TrackedLists(const TopLevelNodes& top, const torch::jit::AliasDb& alias_db)
      : top_(top), alias_db_(alias_db) {}

  // The elements of `list` before nodes[pos]; nullopt when its contents are not known there.
  std::optional<std::vector<Value*>> elementsAt(Value* list, size_t pos) {
    const Contents& contents = contentsOf(list);
    if (!contents.known) return std::nullopt;
    std::vector<Value*> elements = contents.initial;
    for (const auto& [at, element] : contents.appended) {
      if (at < pos) elements.push_back(element);
    }
    return elements;
  }

 private:
  struct Contents {
    bool known = false;
    std::vector<Value*> initial;
    std::vector<std::pair<size_t, Value*>> appended;  // (position of the append, element)
  };

  bool isElement(const Value* v) const {
    return isTensor(v) && !top_.isHoisted(v) &&
           (v->node()->kind() == prim::Param || !mayBeUninitialized(v->node(), v->offset()));
  }

  Contents track(Value* list) const {
    Contents contents;
    Node* construct = list->node();
    const auto list_type = list->type()->cast<c10::ListType>();
    if (construct->kind() != prim::ListConstruct || !top_.index.count(construct) || !list_type ||
        list_type->getElementType()->kind() != c10::TypeKind::TensorType)
      return contents;
    for (Value* v : construct->inputs()) {
      if (!isElement(v)) return contents;
      contents.initial.push_back(v);
    }
    std::unordered_set<const Node*> appends;
    for (const auto& use : list->uses()) {
      Node* u = use.user;
      if (u->kind() != c10::aten::append || use.offset != 0 || !top_.index.count(u)) continue;
      if (!u->output()->uses().empty() || !isElement(u->input(1))) return contents;
      appends.insert(u);
      contents.appended.emplace_back(top_.index.at(u), u->input(1));
    }
    std::sort(contents.appended.begin(), contents.appended.end());
    const torch::jit::ValueSet written{list};
    bool other_writer = false;
    for (size_t i = top_.index.at(construct) + 1; i < top_.end && !other_writer; ++i) {
      forEachNestedNode(top_.nodes[i], [&](Node* n) {
        other_writer = other_writer || (!appends.count(n) && alias_db_.writesToAlias(n, written));
      });
    }
    contents.known = !other_writer;
    return contents;
  }

  const Contents& contentsOf(Value* list) {
    auto it = cache_.find(list);
    if (it == cache_.end()) it = cache_.emplace(list, track(list)).first;
    return it->second;
  }

  const TopLevelNodes& top_;
  const torch::jit::AliasDb& alias_db_;
  std::unordered_map<const Value*, Contents> cache_;
};

// Adds to `cut.live` each element of `cut.lists` that it does not hold yet.
void addListElements(Cut& cut) {
  for (const ListBoundary& list : cut.lists) {
    for (Value* e : list.elements) {
      if (std::find(cut.live.begin(), cut.live.end(), e) == cut.live.end()) cut.live.push_back(e);
    }
  }
}

// A value crosses the cut before nodes[pos] when it is defined at or before pos and used by
// nodes[pos] or later. The chain starts at the first position from chain_begin where only tensors
// and values that can be lifted cross. Tensors defined by then that do not carry the main inputs'
// data are side values, lifted like attributes (when none does, all are carried). A tensor list
// of known contents defined in the chain is carried as its elements (at the chain's end too: the
// rewrite builds it again after the chain). Any other non-tensor defined before the chain makes a
// cut invalid, and so does any other non-tensor defined in it.
std::vector<Cut> validCuts(const TopLevelNodes& top, const torch::jit::AliasDb& alias_db,
                           WrittenAfterDefinition& written, size_t start_from) {
  std::vector<Cut> cuts;
  TrackedLists lists(top, alias_db);
  std::optional<size_t> chain_start;
  std::unordered_set<const Value*> carried_from_before;  // pre-chain tensors in boundaries
  for (size_t pos = start_from; pos <= top.end; ++pos) {
    Cut cut{pos, {}, 0, false, {}};
    bool valid = true;
    for (size_t k = 0; k < top.values.size() && valid; ++k) {
      Value* v = top.values[k];
      const auto& range = top.ranges[k];
      if (v->uses().empty() || top.isHoisted(v)) continue;
      if (!(range.first <= pos && pos <= range.second)) continue;
      const bool before_chain = !chain_start || range.first <= *chain_start;
      if (v->node()->kind() != prim::Param && mayBeUninitialized(v->node(), v->offset())) {
        valid = false;  // may hold no tensor: an early return's placeholder
      } else if (isTensor(v)) {
        if (!chain_start || !before_chain || carried_from_before.count(v)) cut.live.push_back(v);
      } else if (before_chain && isLiftableBeforeChain(v, written)) {
        continue;  // lifted
      } else if (auto elements = chain_start ? lists.elementsAt(v, pos) : std::nullopt) {
        cut.lists.push_back({v, std::move(*elements)});
      } else {
        valid = false;
      }
    }
    addListElements(cut);
    if (!valid || cut.live.empty()) continue;
    if (!chain_start) {
      chain_start = pos;
      std::vector<Value*> main;
      for (Value* v : cut.live) {
        if (top.from_main.count(v)) main.push_back(v);
      }
      if (!main.empty()) cut.live = main;
      carried_from_before.insert(cut.live.begin(), cut.live.end());
    }
    cuts.push_back(std::move(cut));
  }
  return cuts;
}

// How well the chain of `cuts` can separate heavy ops: first the gaps between heavy ops that hold a
// cut (more is better), then the most heavy ops between two consecutive cuts (fewer is better).
struct Separation {
  size_t gaps = 0;
  int largest_stage = 0;
  bool betterThan(const Separation& other) const {
    return gaps != other.gaps ? gaps > other.gaps : largest_stage < other.largest_stage;
  }
};

Separation separation(const std::vector<Cut>& cuts, const HeavyOpCounts& heavy) {
  Separation result;
  std::unordered_set<int> gaps;
  for (size_t i = 0; i < cuts.size(); ++i) {
    gaps.insert(heavy.before[cuts[i].position]);
    if (i > 0)
      result.largest_stage =
          std::max(result.largest_stage, heavy.between(cuts[i - 1].position, cuts[i].position));
  }
  result.gaps = gaps.size();
  return result;
}

// The chain starts at the first position where it can; a later start can lift more values
// computed before it (a flag or an optional mask that forward derives from its first layer's
// output, as nn.TransformerEncoder does), so that more cuts become valid. Later starts up to
// kMaxStartDelay positions on are tried on graphs small enough to search, as long as every tensor
// made before the later start lives on into the chain (as its input: the embeddings of the token
// ids, an input projection): what runs before the chain is held through the step outside the
// plan, and a tensor that died there was a layer's activation, kept for its backward (a
// convolution stem left before the chain put the step many times over the limit). One is taken when
// it separates more heavy ops, or as many with a smaller largest stage.
constexpr size_t kMaxStartDelay = 64;
constexpr size_t kMaxSearchedPositions = 4000;

// Whether `w` is `v`, a view of it or an in-place result on it, or an If that may return one of
// those (the encoder's stream: its input, or a nested tensor made from it). Followed by the graph,
// not by AliasDb, whose wildcards would let any tensor stand for any other.
bool viewOf(Value* w, const Value* v) {
  if (w == v) return true;
  if (w->node()->kind() == c10::prim::If) {
    for (torch::jit::Block* b : w->node()->blocks()) {
      if (viewOf(b->outputs()[w->offset()], v)) return true;
    }
    return false;
  }
  Value* base = aliasBase(w);
  return base != w && viewOf(base, v);
}

// Whether each of `made` that carries the main inputs' data is used at or after `start`, or is
// the base of one that is. Masks built from shapes on the way are no layer's activations.
bool allLiveInto(const std::vector<Value*>& made, size_t start, const TopLevelNodes& top) {
  auto live = [&](const Value* v) { return top.lastUse(v) >= start; };
  for (Value* v : made) {
    if (live(v) || !top.from_main.count(v)) continue;
    const bool viewed =
        std::any_of(made.begin(), made.end(), [&](Value* w) { return live(w) && viewOf(w, v); });
    if (!viewed) return false;
  }
  return true;
}

std::vector<Cut> bestValidCuts(const TopLevelNodes& top, const torch::jit::AliasDb& alias_db) {
  WrittenAfterDefinition written(top, alias_db);
  std::vector<Cut> best = validCuts(top, alias_db, written, top.chain_begin);
  if (best.empty() || top.end > kMaxSearchedPositions) return best;
  const HeavyOpCounts heavy = countHeavyOps(top);
  Separation best_separation = separation(best, heavy);
  const size_t first = best.front().position;
  const size_t last = std::min(top.end, first + kMaxStartDelay);
  std::vector<Value*> made_before;  // tensors made in [first, start)
  for (size_t start = first + 1; start <= last; ++start) {
    for (Value* v : top.nodes[start - 1]->outputs()) {
      if (containsTensor(v->type()) && !v->uses().empty()) made_before.push_back(v);
    }
    if (!allLiveInto(made_before, start, top)) break;
    std::vector<Cut> cuts = validCuts(top, alias_db, written, start);
    if (cuts.empty()) continue;
    const Separation s = separation(cuts, heavy);
    if (s.betterThan(best_separation)) {
      best = std::move(cuts);
      best_separation = s;
    }
  }
  return best;
}

int64_t boundaryBytes(const std::vector<Value*>& live, const ValueBytes& bytes,
                      const std::unordered_set<const Value*>& carried_flags) {
  if (bytes.empty()) {
    return std::count_if(live.begin(), live.end(),
                         [&](const Value* v) { return !carried_flags.count(v); });
  }
  int64_t total = 0;
  for (const Value* v : live) {
    if (carried_flags.count(v)) continue;  // (measured after the edits that made them)
    auto it = bytes.find(v);
    if (it != bytes.end()) total += it->second;  // else never holds data (see value_bytes.h)
  }
  return total;
}

}  // namespace

Node* topLevelOwner(Node* n, const torch::jit::Block* top) {
  while (n->owningBlock() != top) n = n->owningBlock()->owningNode();
  return n;
}

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

std::vector<Node*> nodesAfterHoistedPrefix(Graph& graph) {
  std::vector<Node*> nodes;
  bool in_prefix = true;
  for (Node* n : graph.block()->nodes()) {
    if (in_prefix && (n->kind() == prim::GetAttr || n->kind() == prim::Constant)) continue;
    in_prefix = false;
    nodes.push_back(n);
  }
  return nodes;
}

TopLevelNodes listTopLevel(Graph& graph, size_t num_side_nodes,
                           std::unordered_set<const Value*> carried_flags) {
  TopLevelNodes top;
  top.carried_flags = std::move(carried_flags);
  top.chain_begin = num_side_nodes;
  top.graph = &graph;
  top.block = graph.block();
  top.self = graph.inputs()[0];
  top.nodes = nodesAfterHoistedPrefix(graph);
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
  top.from_main = valuesFromMainInputs(top);
  return top;
}

CandidateCuts findCandidateCuts(const TopLevelNodes& top, const torch::jit::AliasDb& alias_db,
                                const ValueBytes& bytes) {
  CandidateCuts candidates;
  candidates.cuts = bestValidCuts(top, alias_db);
  // No checkpoint may alias a buffer that a node after it writes (carriesWrittenAttribute).
  const auto last_write = lastAttributeWrites(top, candidates.cuts.front().position);
  if (!last_write.empty() && candidates.cuts.size() > 2) {
    auto carries = [&](const Cut& c) { return carriesWrittenAttribute(c, last_write); };
    candidates.cuts.erase(
        std::remove_if(candidates.cuts.begin() + 1, candidates.cuts.end() - 1, carries),
        candidates.cuts.end() - 1);
  }
  // Most nodes write nothing in place: only the others are asked, for each cut.
  std::vector<size_t> writers;
  for (size_t i = 0; i < top.end; ++i) {
    bool writes = false;
    forEachNestedNode(top.nodes[i], [&](Node* n) {
      writes = writes || !n->maybeSchema() || !directlyWrittenInputs(n).empty();
    });
    if (writes) writers.push_back(i);
  }
  for (Cut& c : candidates.cuts) {
    c.bytes = boundaryBytes(c.live, bytes, top.carried_flags);
    const torch::jit::ValueSet live(c.live.begin(), c.live.end());
    auto w = std::lower_bound(writers.begin(), writers.end(), c.position);
    for (; w != writers.end() && !c.written_later; ++w) {
      c.written_later = writesToActivation(top.nodes[*w], live, top, alias_db);
    }
  }
  TORCH_CHECK(!candidates.cuts.empty(),
              "partition: no position in forward has only tensors live; "
              "jitckpt needs a tensor flowing through the model");
  return candidates;
}

}  // namespace jitckpt::partition_steps
