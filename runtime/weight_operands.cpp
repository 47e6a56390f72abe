// multipliesByAComputedWeight (see weight_operands.h).
#include "runtime/weight_operands.h"

#include <unordered_set>

namespace jitckpt {
namespace {

using Values = std::unordered_set<const torch::jit::Value*>;

bool isTensor(const torch::jit::Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; }

// Adds to `computed` the tensors of `block` made from `parameters` (the lifted tensors that may
// require grad) and computed values alone, and says whether a matmul or linear reads one of them
// as an operand.
bool walk(const torch::jit::Block* block, const Values& parameters, Values& computed) {
  auto fromParameters = [&](const torch::jit::Value* v) {
    return parameters.count(v) > 0 || computed.count(v) > 0;
  };
  for (const torch::jit::Node* n : block->nodes()) {
    const std::string kind = n->kind().toQualString();
    const size_t operands = kind == "aten::matmul" || kind == "aten::linear" ? 2 : 0;
    for (size_t i = kind == "aten::linear" ? 1 : 0; i < operands && i < n->inputs().size(); ++i) {
      if (computed.count(n->input(i))) return true;
    }
    for (const auto* b : n->blocks()) {
      if (walk(b, parameters, computed)) return true;
    }
    if (!n->blocks().empty()) continue;  // what a branch or loop returns: not followed
    bool reads_tensor = false, all_from_parameters = true;
    for (const auto* input : n->inputs()) {
      if (!isTensor(input)) continue;
      reads_tensor = true;
      all_from_parameters = all_from_parameters && fromParameters(input);
    }
    if (!reads_tensor || !all_from_parameters) continue;
    for (const auto* output : n->outputs()) {
      if (isTensor(output)) computed.insert(output);
    }
  }
  return false;
}

}  // namespace

bool multipliesByAComputedWeight(const torch::jit::Graph& graph, size_t num_activation_inputs,
                                 const std::vector<bool>& lifted_may_require_grad) {
  Values parameters, computed;
  for (size_t j = 0; j < lifted_may_require_grad.size(); ++j) {
    if (lifted_may_require_grad[j]) parameters.insert(graph.inputs().at(num_activation_inputs + j));
  }
  return !parameters.empty() && walk(graph.block(), parameters, computed);
}

}  // namespace jitckpt
