// Tensor dicts pass (see tensor_dicts.h).
#include "passes/tensor_dicts.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "passes/graph_walk.h"
#include "passes/keep_draws.h"
#include "passes/partition/module.h"

namespace jitckpt {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

bool isLookup(const Node* n) {
  return (n->kind() == c10::aten::__contains__ || n->kind() == c10::aten::__getitem__) &&
         n->inputs().size() == 2 && n->input(0)->type()->kind() == c10::TypeKind::DictType;
}

// The dict attribute `dict` reads, where forward only looks it up.
std::optional<c10::impl::GenericDict> lookedUpAttribute(const torch::jit::Module& module,
                                                        const Value* dict) {
  if (dict->node()->kind() != c10::prim::GetAttr) return std::nullopt;
  for (const auto& use : dict->uses()) {
    if (!isLookup(use.user) || use.offset != 0) return std::nullopt;
  }
  const std::optional<c10::IValue> value = attributeValue(module, dict);
  if (!value || !value->isGenericDict()) return std::nullopt;
  return value->toGenericDict();
}

bool isConstantScalar(const c10::IValue& v) {
  return v.isString() || v.isInt() || v.isDouble() || v.isBool();
}

// `key in self.d` and `self.d[key]` with a constant key, as constants.
size_t foldAttributeLookups(const torch::jit::Module& module, Graph& graph) {
  std::vector<Node*> lookups;
  for (Node* n : graph.nodes())
    forEachNestedNode(n, [&](Node* m) {
      if (isLookup(m)) lookups.push_back(m);
    });
  size_t folded = 0;
  for (Node* n : lookups) {
    const std::optional<c10::IValue> key = torch::jit::toIValue(n->input(1));
    const auto dict = lookedUpAttribute(module, n->input(0));
    if (!key || !dict || !isConstantScalar(*key)) continue;
    const bool has = dict->contains(*key);
    if (n->kind() == c10::aten::__getitem__ && (!has || !isConstantScalar(dict->at(*key))))
      continue;
    torch::jit::WithInsertPoint point(n);
    Value* constant = graph.insertConstant(n->kind() == c10::aten::__contains__ ? c10::IValue(has)
                                                                                : dict->at(*key));
    n->output()->replaceAllUsesWith(constant);
    ++folded;
  }
  return folded;
}

bool isTensorDict(const Value* v) {
  const auto type = v->type()->cast<c10::DictType>();
  return type && type->getKeyType()->kind() == c10::TypeKind::StringType &&
         type->getValueType()->kind() == c10::TypeKind::TensorType;
}

Node* topLevelOwner(Node* n, const torch::jit::Block* top) {
  while (n->owningBlock() != top) n = n->owningBlock()->owningNode();
  return n;
}

std::optional<std::string> constantKey(const Node* n) {
  const std::optional<c10::IValue> key = torch::jit::toIValue(n->input(1));
  if (!key || !key->isString()) return std::nullopt;
  return key->toStringRef();
}

// A dict literal's keys, all constant strings (`{}` has none).
bool constantKeys(const Node* made) {
  for (size_t i = 0; i < made->inputs().size(); i += 2) {
    const std::optional<c10::IValue> key = torch::jit::toIValue(made->input(i));
    if (!key || !key->isString()) return false;
  }
  return true;
}

// One dict made empty or from a literal: its top-level stores and reads under constant keys, in
// order, up to its first other use, before which the dict is built from what was stored (a read
// of a key not stored yet is such a use: it raises as before). Returns whether anything changed.
bool unpackDict(Graph& graph, Node* made) {
  std::vector<torch::jit::Use> uses = made->output()->uses();
  const torch::jit::Block* top = graph.block();
  std::stable_sort(uses.begin(), uses.end(), [&](const auto& a, const auto& b) {
    return topLevelOwner(a.user, top)->isBefore(topLevelOwner(b.user, top));
  });
  std::vector<std::pair<std::string, Value*>> entries;       // in the order of first insertion
  for (size_t i = 0; i + 1 < made->inputs().size(); i += 2)  // {"a": x}: made with entries
    entries.emplace_back(torch::jit::toIValue(made->input(i))->toStringRef(), made->input(i + 1));
  std::vector<Node*> unpacked;
  Node* escape = nullptr;
  for (const torch::jit::Use& use : uses) {
    Node* user = use.user;
    const std::optional<std::string> key =
        user->owningBlock() == top && use.offset == 0 && user->inputs().size() >= 2
            ? constantKey(user)
            : std::nullopt;
    auto entry = std::find_if(entries.begin(), entries.end(),
                              [&](const auto& e) { return key && e.first == *key; });
    if (key && user->kind() == c10::aten::_set_item && user->inputs().size() == 3) {
      if (entry == entries.end())
        entries.emplace_back(*key, user->input(2));
      else
        entry->second = user->input(2);
    } else if (key && user->kind() == c10::aten::__getitem__ && entry != entries.end()) {
      user->output()->replaceAllUsesWith(entry->second);
    } else {
      escape = topLevelOwner(user, top);
      break;
    }
    unpacked.push_back(user);
  }
  if (unpacked.empty()) return false;
  if (escape) {
    torch::jit::WithInsertPoint point(escape);
    std::vector<Value*> keys, values;
    for (const auto& [key, value] : entries) {
      keys.push_back(graph.insertConstant(key));
      values.push_back(value);
    }
    const auto type = made->output()->type()->expect<c10::DictType>();
    Value* built =
        graph.insertNode(graph.createDict(type->getKeyType(), type->getValueType(), keys, values))
            ->output();
    made->output()->replaceAllUsesAfterNodeWith(built->node(), built);
  }
  for (Node* n : unpacked) n->destroy();
  if (!made->hasUses()) made->destroy();
  return true;
}

}  // namespace

size_t unpackTensorDicts(const torch::jit::Module& module,
                         const std::shared_ptr<torch::jit::Graph>& graph) {
  if (foldAttributeLookups(module, *graph) > 0) {
    std::shared_ptr<Graph> edited = graph;                  // the pass takes a non-const one
    torch::jit::ConstantPropagationImmutableTypes(edited);  // the branches the lookups decided
    eliminateDeadCodeKeepingDraws(graph);
  }
  std::vector<Node*> made;
  for (Node* n : graph->nodes()) {
    if ((n->kind() == c10::aten::dict && n->inputs().empty()) ||
        (n->kind() == c10::prim::DictConstruct && constantKeys(n)))
      if (isTensorDict(n->output())) made.push_back(n);
  }
  size_t unpacked = 0;
  for (Node* n : made) unpacked += unpackDict(*graph, n) ? 1 : 0;
  return unpacked;
}

}  // namespace jitckpt
