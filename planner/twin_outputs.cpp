// Twin outputs (see twin_outputs.h).
#include "planner/twin_outputs.h"

#include <ATen/Functions.h>

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "runtime/data_sizes.h"

namespace jitckpt {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

const c10::StorageImpl* storageOf(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
}

// Ops that read a tensor's values on the host, or may: an autocast block runs a graph of its own.
// A number read from a stage input is read from a real tensor or from a copy of a number made from
// sizes alone (a chain whose stages read the data's numbers is sized by data): the fresh outputs of
// zeros hold more than one element.
bool readsValues(const Node* n) {
  static const std::unordered_set<std::string> checks = {"aten::is_nonzero", "aten::equal",
                                                         "aten::allclose", "aten::_assert_async",
                                                         "jitckpt::autocast_block"};
  if (checks.count(n->kind().toQualString())) return true;
  const Value* read = tensorReadIntoNumber(n);
  return read != nullptr && read->node()->kind() != c10::prim::Param;
}

// Whether number `v` comes from the stage's inputs' sizes, constants and lifted numbers alone
// (twinKey compares all three), not from a tensor's values.
bool fromSizes(const Value* v) {
  static const std::unordered_set<std::string> arithmetic = {"aten::add",
                                                             "aten::sub",
                                                             "aten::mul",
                                                             "aten::div",
                                                             "aten::floordiv",
                                                             "aten::remainder",
                                                             "aten::neg",
                                                             "aten::pow",
                                                             "aten::floor",
                                                             "aten::ceil",
                                                             "aten::Int",
                                                             "aten::Float",
                                                             "prim::max",
                                                             "prim::min",
                                                             "aten::eq",
                                                             "aten::ne",
                                                             "aten::lt",
                                                             "aten::le",
                                                             "aten::gt",
                                                             "aten::ge",
                                                             "aten::__getitem__",
                                                             "prim::ListUnpack",
                                                             "prim::ListConstruct",
                                                             "prim::TupleIndex",
                                                             "prim::TupleUnpack",
                                                             "prim::TupleConstruct",
                                                             "aten::len"};
  const Node* n = v->node();
  const std::string kind = n->kind().toQualString();
  if (v->type()->kind() == c10::TypeKind::TensorType) return false;
  if (kind == "prim::Constant" || kind == "prim::Param") return true;  // a lifted number
  // an if's or a loop's result: its inputs and what each block returns for it
  if (kind == "prim::If" || kind == "prim::Loop") {
    const size_t returned =
        v->offset() + (kind == "prim::Loop" ? 1 : 0);  // after a loop's condition
    for (const Value* input : n->inputs())
      if (!fromSizes(input)) return false;
    for (const Block* b : n->blocks())
      if (!fromSizes(b->outputs().at(returned))) return false;
    return true;
  }
  if (readsShapeOnly(n)) {
    for (size_t i = 1; i < n->inputs().size(); ++i)
      if (!fromSizes(n->input(i))) return false;
    return true;
  }
  if (!arithmetic.count(kind)) return false;
  for (const Value* input : n->inputs())
    if (!fromSizes(input)) return false;
  return true;
}

// Whether no op of `block` reads a tensor's values into the host, and its branches and loops
// (the checks of a scripted BatchNorm or convolution) go by sizes, constants and flags alone.
bool valuesStayOnDevice(const Block& block) {
  for (const Node* n : block.nodes()) {
    if (readsValues(n)) return false;
    if (n->blocks().empty()) continue;
    if (n->kind() != c10::prim::If && n->kind() != c10::prim::Loop) return false;
    for (const Value* input : n->inputs())
      if (!fromSizes(input)) return false;
    for (const Block* b : n->blocks())
      if (!valuesStayOnDevice(*b)) return false;
  }
  return true;
}

// Whether graph output `v` is a number made into a tensor from sizes alone (a size the partition
// carries across a cut): the same in every twin of the stage.
bool numberFromSizes(const Value* v) {
  static const std::unordered_set<std::string> carriers = {"prim::NumToTensor", "aten::tensor",
                                                           "aten::scalar_tensor"};
  const Node* n = v->node();
  if (!carriers.count(n->kind().toQualString()) || n->inputs().empty()) return false;
  for (size_t i = 1; i < n->inputs().size(); ++i)
    if (n->input(i)->node()->kind() != c10::prim::Constant) return false;
  return fromSizes(n->input(0));
}

}  // namespace

std::optional<TwinOutputLayout> twinOutputLayout(const Tensors& inputs, const Tensors& outputs,
                                                 const std::vector<at::Tensor>& lifted,
                                                 const torch::jit::Graph& graph) {
  const bool by_value = graph.outputs().size() == outputs.size();
  std::unordered_map<const c10::StorageImpl*, int> input_of;
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (const auto* s = storageOf(inputs[j])) input_of.emplace(s, static_cast<int>(j));
  }
  std::unordered_set<const c10::StorageImpl*> others;
  for (const auto& t : lifted) others.insert(storageOf(t));
  std::unordered_map<const c10::StorageImpl*, int> fresh_of;
  TwinOutputLayout layout;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& t = outputs[i];
    TwinOutputLayout::Output out;
    if (t.defined() && !input_of.count(storageOf(t)) && by_value &&
        numberFromSizes(graph.outputs()[i])) {
      out.defined = true;
      out.number = t.clone();
    } else if (t.defined()) {
      const auto* storage = storageOf(t);
      if (!storage || t.layout() != c10::kStrided || t.is_conj() || t.is_neg()) return std::nullopt;
      out.defined = true;
      out.sizes = t.sizes().vec();
      out.strides = t.strides().vec();
      out.offset = t.storage_offset();
      const auto input = input_of.find(storage);
      if (input != input_of.end()) {
        if (inputs[input->second].scalar_type() != t.scalar_type()) return std::nullopt;
        out.input = input->second;
      } else {
        // (more than one element: a number read from a stand-in would be a wrong number)
        if (others.count(storage) || !t.is_floating_point() || t.numel() <= 1) return std::nullopt;
        const auto [found, added] =
            fresh_of.emplace(storage, static_cast<int>(layout.fresh.size()));
        if (added) {
          const auto item = static_cast<int64_t>(t.element_size());
          if (static_cast<int64_t>(t.storage().nbytes()) % item != 0) return std::nullopt;
          layout.fresh.push_back({static_cast<int64_t>(t.storage().nbytes()) / item, t.options()});
        } else if (layout.fresh[found->second].options.dtype() != t.dtype()) {
          return std::nullopt;
        }
        out.fresh = found->second;
      }
    }
    layout.outputs.push_back(std::move(out));
  }
  return layout;
}

Tensors twinOutputs(const TwinOutputLayout& layout, const Tensors& inputs) {
  std::vector<at::Tensor> fresh;
  for (const auto& f : layout.fresh) fresh.push_back(at::zeros({f.elements}, f.options));
  Tensors outputs;
  for (const auto& out : layout.outputs) {
    if (!out.defined || out.number.defined()) {
      outputs.push_back(out.number.defined() ? out.number.clone() : at::Tensor());
      continue;
    }
    TORCH_INTERNAL_ASSERT(out.input < static_cast<int>(inputs.size()),
                          "twin outputs: the twin has fewer inputs than the stage measured");
    const at::Tensor& base = out.input >= 0 ? inputs[out.input] : fresh.at(out.fresh);
    outputs.push_back(base.as_strided(out.sizes, out.strides, out.offset));
  }
  return outputs;
}

bool sizesIgnoreValues(const ChainStages& stages) {
  if (!stages.stagesSizedByData().empty()) return false;
  for (const auto& stage : stages.stages()) {
    if (!valuesStayOnDevice(*stage.graph->block())) return false;
  }
  return true;
}

}  // namespace jitckpt
