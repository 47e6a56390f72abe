// Inline pass (see inline_calls.h).
#include "passes/inline_calls.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/peephole.h>

#include <vector>

#include "passes/graph_walk.h"

namespace jitckpt {
namespace {

// The graph function a call node calls; null for anything else (a builtin, a native function).
torch::jit::GraphFunction* calleeOf(torch::jit::Node* n) {
  torch::jit::Function* function = nullptr;
  if (n->kind() == c10::prim::CallMethod) {
    const auto cls = n->input(0)->type()->cast<c10::ClassType>();
    if (cls) function = cls->findMethod(n->s(c10::attr::name));
  } else if (n->kind() == c10::prim::CallFunction) {
    const auto type = n->input(0)->type()->cast<c10::FunctionType>();
    if (type) function = type->function();
  }
  return function && function->isGraphFunction() ? &torch::jit::toGraphFunction(*function)
                                                 : nullptr;
}

// Inlines the calls of this level (callees' own calls come in with them); returns how many.
size_t inlineOneLevel(torch::jit::Graph& graph) {
  std::vector<std::pair<torch::jit::Node*, torch::jit::GraphFunction*>> calls;
  for (torch::jit::Node* top : graph.nodes()) {
    forEachNestedNode(top, [&](torch::jit::Node* n) {
      if (auto* callee = calleeOf(n)) calls.emplace_back(n, callee);
    });
  }
  for (auto& [node, callee] : calls) {
    // A CallFunction's first input is the function itself, which the callee does not take.
    if (node->kind() == c10::prim::CallFunction) node->removeInput(0);
    torch::jit::inlineCallTo(node, callee, callee->graph().get());
  }
  return calls.size();
}

}  // namespace

void inlineAllCalls(const std::shared_ptr<torch::jit::Graph>& graph) {
  for (int level = 0; level < 64; ++level) {
    if (inlineOneLevel(*graph) == 0) break;
  }
  std::shared_ptr<torch::jit::Graph> simplified = graph;  // the passes take a non-const one
  torch::jit::PeepholeOptimize(simplified, /*disable_shape_peepholes=*/true);
  torch::jit::ConstantPropagationImmutableTypes(simplified);
  torch::jit::ConstantPooling(simplified);
  torch::jit::EliminateDeadCode(simplified);  // the function constants of inlined CallFunctions
}

}  // namespace jitckpt
