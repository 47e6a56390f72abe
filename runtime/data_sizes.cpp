// Tensors sized by data (see data_sizes.h).
#include "runtime/data_sizes.h"

#include <string>
#include <unordered_map>
#include <unordered_set>

namespace jitckpt {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// Whether `v` holds the same values at every call: made of constants, parameters, buffers and
// flags alone (a relative position index that a buffer holds), not of the data.
class ModelState {
 public:
  ModelState(const StageSpec& stage, const std::vector<LiftedSpec>& lifted)
      : stage_(stage), lifted_(lifted) {}

  bool holds(const Value* v) {
    const auto found = memo_.find(v);
    if (found != memo_.end()) return found->second;
    memo_[v] = false;  // (a cycle cannot occur in a graph; this bounds the walk all the same)
    return memo_[v] = compute(v);
  }

 private:
  bool compute(const Value* v) {
    const Node* n = v->node();
    if (n->kind() == c10::prim::Param) {
      if (v->offset() < stage_.num_activation_inputs) return false;
      const size_t k = stage_.lifted.at(v->offset() - stage_.num_activation_inputs);
      return lifted_.at(k).kind != LiftedKind::Side;
    }
    if (n->kind() == c10::prim::Constant) return true;
    if (!n->blocks().empty()) return false;
    for (const Value* input : n->inputs()) {
      if (!holds(input)) return false;
    }
    return true;
  }

  const StageSpec& stage_;
  const std::vector<LiftedSpec>& lifted_;
  std::unordered_map<const Value*, bool> memo_;
};

const std::unordered_set<std::string>& alwaysSizedByData() {
  static const std::unordered_set<std::string> kinds = {
      "aten::nonzero",       "aten::nonzero_numpy", "aten::argwhere",
      "aten::masked_select", "aten::unique",        "aten::_unique",
      "aten::_unique2",      "aten::unique_dim",    "aten::unique_consecutive"};
  return kinds;
}

bool holdsTensor(const Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; }

bool sizedByData(const Node* n, ModelState& state) {
  const std::string kind = n->kind().toQualString();
  if (alwaysSizedByData().count(kind)) return true;
  if (readsTensorIntoNumber(n)) return true;
  // x[mask] keeps as many rows as the mask has true entries; an index of integers gives its own
  // shape, which the graph does not tell apart from a mask, unless it holds the model's state.
  if (kind == "aten::index") {
    const Value* indices = n->inputs().size() > 1 ? n->input(1) : nullptr;
    if (!indices || indices->node()->kind() != c10::prim::ListConstruct) return true;
    for (const Value* index : indices->node()->inputs()) {
      if (index->type()->kind() != c10::TypeKind::NoneType && !state.holds(index)) return true;
    }
    return false;
  }
  // where(condition) alone is nonzero; repeat_interleave with a tensor of repeats
  if (kind == "aten::where") return n->inputs().size() == 1;
  if (kind == "aten::repeat_interleave")
    return n->inputs().size() == 1 || (n->inputs().size() >= 2 && holdsTensor(n->input(1)));
  return false;
}

bool anySizedByData(const torch::jit::Block* block, ModelState& state) {
  for (const Node* n : block->nodes()) {
    if (sizedByData(n, state)) return true;
    for (const auto* b : n->blocks()) {
      if (anySizedByData(b, state)) return true;
    }
  }
  return false;
}

}  // namespace

bool readsTensorIntoNumber(const Node* n) {
  static const std::unordered_set<std::string> kinds = {"aten::item",
                                                        "aten::_local_scalar_dense",
                                                        "aten::Int",
                                                        "aten::Float",
                                                        "aten::IntImplicit",
                                                        "aten::FloatImplicit",
                                                        "aten::ScalarImplicit",
                                                        "aten::tolist",
                                                        "prim::tolist"};
  // A number carried across a cut in a 0-dim tensor (a size: the partition's scalar carriers) is
  // read back in the stage that made the tensor or in a later one; where it came from values, the
  // stage that computed it holds the op.
  static const std::unordered_set<std::string> carriers = {
      "prim::Param", "aten::tensor", "prim::NumToTensor", "aten::scalar_tensor"};
  if (!kinds.count(n->kind().toQualString()) || n->inputs().empty()) return false;
  const Value* read = n->input(0);
  return holdsTensor(read) && !carriers.count(read->node()->kind().toQualString());
}

bool makesTensorsSizedByData(const StageSpec& stage, const std::vector<LiftedSpec>& lifted) {
  ModelState state(stage, lifted);
  return anySizedByData(stage.graph->block(), state);
}

}  // namespace jitckpt
