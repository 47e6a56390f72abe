// Inline pass (see inline_calls.h).
#include "passes/inline_calls.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/peephole_dict_idioms.h>
#include <torch/csrc/jit/passes/peephole_list_idioms.h>

#include <vector>

#include "passes/graph_walk.h"
#include "passes/keep_draws.h"

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

// An `if`'s outputs: Optional where neither branch returns an Optional value becomes the
// branches' type, and a bool that is its condition (`x and True`) becomes the condition.
void refineIfOutputs(torch::jit::Node* n) {
  const auto then_outputs = n->blocks()[0]->outputs();
  const auto else_outputs = n->blocks()[1]->outputs();
  for (size_t i = 0; i < n->outputs().size(); ++i) {
    torch::jit::Value* out = n->output(i);
    const auto& a = then_outputs[i]->type();
    const auto& b = else_outputs[i]->type();
    if (out->type()->cast<c10::OptionalType>() && !a->cast<c10::OptionalType>() &&
        !b->cast<c10::OptionalType>()) {
      if (auto unified = c10::unifyTypes(a, b)) out->setType(*unified);
    }
    if (out->type()->kind() == c10::TypeKind::BoolType &&
        torch::jit::constant_as<bool>(then_outputs[i]).value_or(false) &&
        !torch::jit::constant_as<bool>(else_outputs[i]).value_or(true)) {
      out->replaceAllUsesWith(n->input());
    }
  }
}

// The rules of TorchScript's number peepholes (PeepholeOptimizeNonTensor, which Debian's 1.13
// does not export) that let constant propagation drop the `is None` branches of inlined callees:
// `x is None` and `x is not None` where one side must be None and the other cannot, the unwraps
// and casts of a value that already has the type, and refineIfOutputs. None of them touches a
// tensor op.
void foldNoneChecks(torch::jit::Block* block) {
  for (torch::jit::Node* n : block->nodes()) {
    for (torch::jit::Block* b : n->blocks()) foldNoneChecks(b);
    if (n->kind() == c10::prim::If) {
      refineIfOutputs(n);
    } else if ((n->kind() == c10::aten::__is__ || n->kind() == c10::aten::__isnot__) &&
               n->inputs().size() == 2) {
      for (size_t i : {0, 1}) {
        if (!n->input(i)->mustBeNone() || !n->input(1 - i)->mustNotBeNone()) continue;
        torch::jit::WithInsertPoint point(n);
        n->output()->replaceAllUsesWith(
            n->owningGraph()->insertConstant(n->kind() == c10::aten::__isnot__));
        break;
      }
    } else if (n->kind() == c10::prim::unchecked_unwrap_optional ||
               n->kind() == c10::aten::_unwrap_optional) {
      if (n->input()->mustNotBeNone()) n->output()->replaceAllUsesWith(n->input());
    } else if (n->kind() == c10::prim::unchecked_cast) {
      if (c10::unshapedType(n->input()->type())
              ->isSubtypeOf(*c10::unshapedType(n->output()->type())))
        n->output()->replaceAllUsesWith(n->input());
    }
  }
}

}  // namespace

void inlineAllCalls(const std::shared_ptr<torch::jit::Graph>& graph) {
  for (int level = 0; level < 64; ++level) {
    if (inlineOneLevel(*graph) == 0) break;
  }
  std::shared_ptr<torch::jit::Graph> simplified = graph;  // the passes take a non-const one
  // The peepholes on lists and dicts only. PeepholeOptimize also rewrites tensor ops (x.t().t()
  // to x, x + 0 to x, a cat of a cat to one cat), which the unmodified model, run by the
  // interpreter without executor optimization, does not: their gradients then add in another
  // order (a tensor transposed twice across a cut gave other bits in its producer's weights).
  torch::jit::PeepholeOptimizeListIdioms(simplified);
  torch::jit::PeepholeOptimizeDictIdioms(simplified);
  foldNoneChecks(simplified->block());
  torch::jit::ConstantPropagationImmutableTypes(simplified);
  torch::jit::ConstantPooling(simplified);
  eliminateDeadCodeKeepingDraws(simplified);  // the function constants of inlined CallFunctions
}

}  // namespace jitckpt
