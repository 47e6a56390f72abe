// Steps 2 and 4 of the partition pass: the chain's main inputs, and the side computations moved
// before the chain (masks, position ids and tables built from shapes, attributes and other inputs).

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "passes/graph_walk.h"
#include "passes/keep_draws.h"
#include "passes/partition/steps.h"
#include "runtime/stages.h"

namespace jitckpt::partition_steps {
namespace {

namespace prim = c10::prim;

// Bit i: the data comes from graph input i (inputs past 63 share the last bit).
using InputSet = uint64_t;

InputSet inputBit(size_t i) { return InputSet{1} << std::min<size_t>(i, 63); }

bool definedInside(const Value* v, const Node* n) {
  for (const Node* d = v->node(); d;) {
    if (d == n) return true;
    const torch::jit::Block* b = d->owningBlock();
    d = b ? b->owningNode() : nullptr;
  }
  return false;
}

// The values defined outside `n` that `n` or a node nested in it reads. With `data_only`, only
// those whose data reaches an output of `n`, approximately: read by a node that outputs values
// holding tensors, or returned by a nested block (a shape, dtype or device carries no data).
std::vector<Value*> outsideReads(Node* n, bool data_only = false) {
  std::vector<Value*> reads;
  std::unordered_set<const Value*> seen;
  forEachNestedNode(
      n,
      [&](Node* m) {
        bool passes_data = !data_only || m->kind() == prim::Return;
        for (const Value* o : m->outputs()) passes_data = passes_data || containsTensor(o->type());
        if (!passes_data) return;
        for (Value* v : m->inputs()) {
          if (!definedInside(v, n) && seen.insert(v).second) reads.push_back(v);
        }
      },
      BlockReturns::Visit);
  return reads;
}

std::vector<Value*> dataReads(Node* n) { return outsideReads(n, /*data_only=*/true); }

// Which graph inputs each value's data comes from, through the values that hold tensors.
std::unordered_map<const Value*, InputSet> dataSources(const TopLevelNodes& top) {
  std::unordered_map<const Value*, InputSet> sources;
  const auto inputs = top.graph->inputs();
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (containsTensor(inputs[i]->type())) sources[inputs[i]] = inputBit(i);
  }
  for (Node* n : top.nodes) {
    InputSet from = 0;
    for (const Value* v : dataReads(n)) {
      auto it = sources.find(v);
      if (it != sources.end()) from |= it->second;
    }
    for (const Value* o : n->outputs()) {
      if (containsTensor(o->type()) && from) sources[o] = from;
    }
  }
  return sources;
}

// The inputs whose data reaches the first heavy op that reads any input's data, from chain_begin
// on, and every input that a top-level heavy op reads itself (the target tokens of an
// encoder-decoder, embedded beside the source's; a second image or feature vector): computed
// before the chain, their layers would hold their activations as side values through the whole
// step, outside any schedule. Masks and position ids reach heavy ops only through other ops, so
// they stay side computations.
InputSet mainInputSet(const TopLevelNodes& top,
                      const std::unordered_map<const Value*, InputSet>& sources) {
  InputSet first = 0, read_by_heavy = 0;
  const auto inputs = top.graph->inputs();
  for (size_t i = top.chain_begin; i < top.end; ++i) {
    Node* n = top.nodes[i];
    if (!isHeavyOp(n)) continue;
    if (!first) {
      for (const Value* v : dataReads(n)) {
        auto it = sources.find(v);
        if (it != sources.end()) first |= it->second;
      }
    }
    if (n->blocks().empty()) {
      for (const Value* v : n->inputs()) {
        for (size_t k = 1; k < inputs.size(); ++k) {
          if (v == inputs[k] && isTensor(v)) read_by_heavy |= inputBit(k);
        }
      }
    }
  }
  return first ? first | read_by_heavy : 0;
}

// Effects that a node may have and still run earlier in the same forward call, or twice: errors,
// warnings, and reads of the grad and autocast modes, which forward does not change.
const std::unordered_set<c10::Symbol> kHarmlessEffects = {
    prim::RaiseException, c10::aten::warn, c10::Symbol::aten("is_grad_enabled"),
    c10::Symbol::aten("is_autocast_enabled"), c10::Symbol::aten("is_autocast_cpu_enabled")};

// No random numbers, no writes to values defined outside it, no effects but harmless ones: `n`
// may run earlier, or twice.
bool isPure(Node* n) {
  bool ok = true;
  forEachNestedNode(n, [&](Node* m) {
    if (!ok) return;
    if (drawsRandomNumbers(m) || (m->hasSideEffects() && !kHarmlessEffects.count(m->kind()))) {
      ok = false;
      return;
    }
    for (size_t a : directlyWrittenInputs(m)) {
      if (!definedInside(m->input(a), n)) ok = false;
    }
  });
  return ok;
}

// Whether moving `n` before the chain keeps the program's meaning: it is pure and nothing it reads
// is written in place anywhere. Nor is what it makes: a stage that wrote a lifted value would
// write the runtime's stand-in for it, a leaf where it may require grad (a bias cloned from a
// parameter and partly zeroed, as Swin V2's attention does).
bool canMoveEarlier(Node* n, const torch::jit::AliasDb& alias_db) {
  if (!isPure(n)) return false;
  for (const Value* v : outsideReads(n)) {
    if (alias_db.hasWriters(v)) return false;
  }
  for (const Value* o : n->outputs()) {
    if (alias_db.hasWriters(o)) return false;
  }
  return true;
}

// Removes the outputs of `n` (and of its blocks) at `indices`, in descending order.
void eraseOutputs(Node* n, const std::vector<size_t>& indices) {
  for (auto it = indices.rbegin(); it != indices.rend(); ++it) {
    n->eraseOutput(*it);
    for (torch::jit::Block* b : n->blocks()) b->eraseOutput(*it);
  }
  for (torch::jit::Block* b : n->blocks()) eliminateDeadCodeKeepingDraws(b);
}

// Of the nodes that could move, those that compute side tensors and what these read: a list of
// constants or a shape that only stays in the chain needs no moving.
std::vector<Node*> neededForSideTensors(const std::vector<Node*>& movable) {
  std::unordered_set<const Value*> read_by_needed;
  std::vector<Node*> needed;
  for (auto it = movable.rbegin(); it != movable.rend(); ++it) {
    Node* n = *it;
    bool need = false;
    for (const Value* o : n->outputs()) {
      need = need || containsTensor(o->type()) || read_by_needed.count(o);
    }
    if (!need) continue;
    needed.insert(needed.begin(), n);
    for (Value* v : outsideReads(n)) read_by_needed.insert(v);
  }
  return needed;
}

}  // namespace

bool containsTensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  for (const auto& contained : type->containedTypes()) {
    if (containsTensor(contained)) return true;
  }
  return false;
}

void splitMixedIfs(Graph& graph) {
  std::vector<Node*> ifs;
  for (Node* n : graph.nodes()) {
    if (n->kind() == prim::If && n->outputs().size() > 1 && isPure(n)) ifs.push_back(n);
  }
  for (Node* n : ifs) {
    std::vector<size_t> tensors, others;
    for (size_t o = 0; o < n->outputs().size(); ++o) {
      (n->output(o)->type()->kind() == c10::TypeKind::TensorType ? tensors : others).push_back(o);
    }
    if (tensors.empty() || others.empty()) continue;
    Node* copy = graph.createClone(n, [](Value* v) { return v; });
    copy->insertAfter(n);
    for (size_t o : others) n->output(o)->replaceAllUsesWith(copy->output(o));
    eraseOutputs(copy, tensors);
    eraseOutputs(n, others);
  }
}

size_t hoistSideComputations(Graph& graph, const torch::jit::AliasDb& alias_db) {
  const TopLevelNodes top = listTopLevel(graph);
  const auto sources = dataSources(top);
  const InputSet main = mainInputSet(top, sources);
  if (!main) return 0;
  std::unordered_set<const Value*> available;  // before the chain: inputs, hoisted, moved
  for (Value* v : graph.inputs()) available.insert(v);
  std::vector<Node*> moved;
  for (Node* n : top.nodes) {
    bool movable = n->kind() != prim::Uninitialized;
    for (const Value* v : outsideReads(n)) {
      if (!available.count(v) && !top.isHoisted(v)) movable = false;
    }
    // The main inputs' data stays in the chain; their shapes may move.
    for (const Value* v : dataReads(n)) {
      auto it = sources.find(v);
      if (it != sources.end() && (it->second & main)) movable = false;
    }
    // Lists and tuples of tensors stay too: lifted, they could not carry gradients (an RNN's
    // weights); so do values another branch leaves uninitialized (an early return).
    for (size_t o = 0; o < n->outputs().size(); ++o) {
      const auto kind = n->output(o)->type()->kind();
      if (containsTensor(n->output(o)->type()) && kind != c10::TypeKind::TensorType &&
          kind != c10::TypeKind::OptionalType)
        movable = false;
      if (mayBeUninitialized(n, o)) movable = false;
    }
    if (!movable || n->outputs().empty() || !canMoveEarlier(n, alias_db)) continue;
    moved.push_back(n);
    for (Value* o : n->outputs()) available.insert(o);
  }
  moved = neededForSideTensors(moved);
  // The moved nodes go, in order, before the first node that stays.
  Node* first_staying = nullptr;
  std::unordered_set<const Node*> moving(moved.begin(), moved.end());
  for (Node* n : top.nodes) {
    if (!moving.count(n)) {
      first_staying = n;
      break;
    }
  }
  if (!first_staying) return 0;  // nothing reads the main inputs' data: no chain to find
  for (Node* n : moved) n->moveBefore(first_staying);
  return moved.size();
}

std::unordered_set<const Value*> valuesFromMainInputs(const TopLevelNodes& top) {
  const auto sources = dataSources(top);
  const InputSet main = mainInputSet(top, sources);
  std::unordered_set<const Value*> from_main;
  for (const auto& [v, from] : sources) {
    if (from & main) from_main.insert(v);
  }
  return from_main;
}

}  // namespace jitckpt::partition_steps
