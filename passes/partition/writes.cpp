// In-place writes for the partition pass: which inputs a node writes, whether it writes an
// activation (a boundary tensor, or a view or alias of one) rather than an attribute, and which
// cuts would carry an attribute that a later node writes.
#include <string>
#include <unordered_map>

#include "passes/graph_walk.h"
#include "passes/partition/steps.h"
#include "runtime/stages.h"

namespace jitckpt::partition_steps {

// Writes to attributes (running statistics, num_batches_tracked) are left out: attributes are
// lifted, never activations, yet AliasDb keeps them in the wildcard set together with every
// tensor that was stored in a list (DenseNet's feature list), so writesToAlias would flag every
// BatchNorm in such a model. Nodes without a schema fall back to AliasDb's answer.
namespace {

// The input of `w`'s node whose storage `w` is (an unchecked cast's, or the argument with the
// alias set of `w`'s return in the schema); nullptr where `w` has storage of its own or the node
// has no schema.
Value* aliasedInput(Value* w) {
  Node* n = w->node();
  if (n->kind() == c10::prim::unchecked_cast) return n->input(0);
  const auto* schema = n->maybeSchema();
  if (!schema || w->offset() >= schema->returns().size()) return nullptr;
  const auto* alias = schema->returns()[w->offset()].alias_info();
  if (!alias) return nullptr;
  Value* source = nullptr;
  for (size_t a = 0; a < schema->arguments().size() && a < n->inputs().size(); ++a) {
    const auto* input_alias = schema->arguments()[a].alias_info();
    if (input_alias && input_alias->beforeSets() == alias->beforeSets()) source = n->input(a);
  }
  return source;
}

// Whether the storage of `w` was made by an op positioned after `v`'s definition: `w` followed
// back as aliasBase does, to an output whose schema gives it no alias set (fresh storage).
bool madeAfter(Value* w, const Value* v, const TopLevelNodes& top) {
  for (int step = 0; step < 64; ++step) {
    Node* n = w->node();
    const auto* schema = n->maybeSchema();
    if (n->kind() != c10::prim::unchecked_cast && schema &&
        w->offset() < schema->returns().size() && !schema->returns()[w->offset()].alias_info()) {
      const auto found = top.index.find(topLevelOwner(n, top.block));
      return found != top.index.end() && found->second >= top.definedAt(v);
    }
    w = aliasedInput(w);
    if (!w) return false;
  }
  return false;
}

// Whether `v` may hold the storage of `written`: as an alias (a tensor, an Optional tensor), or
// among its elements (a list or tuple). Only containers ask mayContainAlias: asked of the
// encoder's Optional mask on PyTorch 2.x it also matched in-place writes that mayAlias does not,
// and nn.TransformerEncoder was one stage again.
bool mayHold(const Value* written, const Value* v, const torch::jit::AliasDb& alias_db) {
  const auto kind = v->type()->kind();
  if (kind == c10::TypeKind::ListType || kind == c10::TypeKind::TupleType)
    return alias_db.mayContainAlias(const_cast<Value*>(written), const_cast<Value*>(v));
  return alias_db.mayAlias(written, v);
}

}  // namespace

Value* aliasBase(Value* v) {
  for (int step = 0; step < 64; ++step) {
    Value* source = aliasedInput(v);
    if (!source) return v;
    v = source;
  }
  return v;
}

bool writesToActivation(Node* n, const torch::jit::ValueSet& values, const TopLevelNodes& top,
                        const torch::jit::AliasDb& alias_db) {
  if (!n->blocks().empty()) {
    for (auto* block : n->blocks()) {
      for (Node* inner : block->nodes()) {
        if (writesToActivation(inner, values, top, alias_db)) return true;
      }
    }
    return false;
  }
  if (!n->maybeSchema()) return alias_db.writesToAlias(n, values);
  for (size_t a : directlyWrittenInputs(n)) {
    Value* written = n->input(a);
    // (an attribute, or a view of one: `self.ema.mul_(m).add_(x)` writes the attribute)
    if (aliasBase(written)->node()->kind() == c10::prim::GetAttr) continue;
    for (const Value* v : values) {
      // A tensor made after v (F._canonical_mask's zeros_like(mask).masked_fill_ on 2.x) is not
      // v, though AliasDb puts both among the wildcards once a tuple of tensors is iterated.
      const bool fresh =
          v->type()->kind() == c10::TypeKind::TensorType && madeAfter(written, v, top);
      if (alias_db.mayAlias(written, v) && !fresh) return true;
    }
  }
  return false;
}

bool writesToValue(const Node* n, const Value* v, const TopLevelNodes& top,
                   const torch::jit::AliasDb& alias_db) {
  if (!n->maybeSchema())
    return alias_db.writesToAlias(const_cast<Node*>(n), torch::jit::ValueSet{v});
  // (an argument of forward is not an attribute's storage, whose running statistics the norms
  // write: a BatchNorm after an optional mask of forward's kept the layers before it out of the
  // chain. A value computed before the chain may hold an attribute's view.)
  const bool argument = v->node() == v->owningGraph()->param_node() && v->offset() > 0;
  for (size_t a : directlyWrittenInputs(n)) {
    Value* written = const_cast<Value*>(n->input(a));
    if (argument && aliasBase(written)->node()->kind() == c10::prim::GetAttr) continue;
    if (mayHold(written, v, alias_db) && !madeAfter(written, v, top)) return true;
  }
  return false;
}

std::unordered_map<std::string, size_t> lastAttributeWrites(const TopLevelNodes& top, size_t from) {
  std::unordered_map<std::string, size_t> last_write;
  for (size_t i = from; i < top.end; ++i) {
    forEachNestedNode(top.nodes[i], [&](Node* n) {
      for (size_t a : directlyWrittenInputs(n)) {
        Value* base = aliasBase(n->input(a));
        if (base->node()->kind() == c10::prim::GetAttr && top.isHoisted(base))
          last_write[attributePath(base)] = i;
      }
    });
  }
  return last_write;
}

bool carriesWrittenAttribute(const Cut& cut,
                             const std::unordered_map<std::string, size_t>& last_write) {
  for (Value* v : cut.live) {
    Value* base = aliasBase(v);
    if (base->node()->kind() != c10::prim::GetAttr) continue;
    const auto last = last_write.find(attributePath(base));
    if (last != last_write.end() && cut.position <= last->second) return true;
  }
  return false;
}

}  // namespace jitckpt::partition_steps
