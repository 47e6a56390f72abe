// Example inputs to plan on (see example_copies.h).
#include "passes/example_copies.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/ir/alias_analysis.h>

namespace jitckpt {
namespace {

using torch::jit::AliasDb;
using torch::jit::Node;
using torch::jit::Value;

bool isContainer(const Value* v) {
  const auto kind = v->type()->kind();
  return kind == c10::TypeKind::ListType || kind == c10::TypeKind::TupleType ||
         kind == c10::TypeKind::DictType;
}

// `written` may be `input`, a view of it, or a tensor it holds.
bool mayReach(const AliasDb& alias_db, Value* written, Value* input) {
  return alias_db.mayAlias(written, input) ||
         (isContainer(input) && alias_db.mayContainAlias(written, input));
}

bool writesTo(const AliasDb& alias_db, Node* n, const std::vector<Value*>& inputs) {
  for (auto* block : n->blocks()) {
    for (Node* inner : block->nodes()) {
      if (writesTo(alias_db, inner, inputs)) return true;
    }
  }
  const auto* schema = n->maybeSchema();
  if (!schema) {
    return n->blocks().empty() &&
           alias_db.writesToAlias(n, torch::jit::ValueSet(inputs.begin(), inputs.end()));
  }
  for (size_t a = 0; a < schema->arguments().size() && a < n->inputs().size(); ++a) {
    const auto* alias = schema->arguments()[a].alias_info();
    Value* written = n->input(a);
    if (!alias || !alias->isWrite() || written->node()->kind() == c10::prim::GetAttr) continue;
    for (Value* input : inputs) {
      if (mayReach(alias_db, written, input)) return true;
    }
  }
  return false;
}

c10::IValue copyOf(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return v;
    return t.detach().clone().requires_grad_(t.requires_grad());
  }
  if (v.isList()) {
    const c10::impl::GenericList list = v.toList();
    c10::impl::GenericList copy(list.elementType());
    for (size_t i = 0; i < list.size(); ++i) copy.push_back(copyOf(list.get(i)));
    return copy;
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& element : v.toTupleRef().elements())
      elements.push_back(copyOf(element));
    const auto type = v.toTupleRef().type();
    if (type->name())  // a NamedTuple keeps its type
      return c10::ivalue::Tuple::createNamed(std::move(elements), type);
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (v.isGenericDict()) {
    auto dict = v.toGenericDict();
    c10::impl::GenericDict copy(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) copy.insert(entry.key(), copyOf(entry.value()));
    return copy;
  }
  return v;
}

}  // namespace

bool writesItsInputs(const std::shared_ptr<torch::jit::Graph>& graph) {
  const AliasDb alias_db(graph);
  std::vector<Value*> inputs(graph->inputs().begin() + 1, graph->inputs().end());  // not self
  for (Node* n : graph->nodes()) {
    if (writesTo(alias_db, n, inputs)) return true;
  }
  return false;
}

std::vector<c10::IValue> withForwardDefaults(const torch::jit::Module& module,
                                             std::vector<c10::IValue> inputs) {
  if (inputs.empty()) return inputs;
  const auto& arguments = module.get_method("forward").function().getSchema().arguments();
  const size_t expected = arguments.size() - 1;  // without self
  TORCH_CHECK(inputs.size() <= expected, "forward takes ", expected, " input(s) besides self, but ",
              inputs.size(), " were given");
  for (size_t i = inputs.size(); i < expected; ++i) {
    const c10::Argument& argument = arguments[i + 1];
    TORCH_CHECK(argument.default_value().has_value(), "forward's argument '", argument.name(),
                "' has no default, but the example inputs stop before it (", inputs.size(), " of ",
                expected, " given): pass a value for it as training does");
    inputs.push_back(*argument.default_value());
  }
  return inputs;
}

std::vector<c10::IValue> examplesToRunOn(const std::shared_ptr<torch::jit::Graph>& graph,
                                         const std::vector<c10::IValue>& example_inputs) {
  if (!writesItsInputs(graph)) return example_inputs;
  const c10::NoGradGuard no_grad;
  std::vector<c10::IValue> copies;
  for (const c10::IValue& v : example_inputs) copies.push_back(copyOf(v));
  return copies;
}

}  // namespace jitckpt
