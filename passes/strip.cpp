// Strip pass (see strip.h).
#include "passes/strip.h"

#include <torch/csrc/jit/ir/ir.h>

#include "runtime/plan.h"

namespace jitckpt {
namespace {

// Replaces `target`'s nodes and outputs by a copy of `source`'s, keeping target's inputs (whose
// types may differ in the class of self only).
void replaceGraphBody(torch::jit::Graph& target, torch::jit::Graph& source) {
  while (!target.outputs().empty()) target.eraseOutput(target.outputs().size() - 1);
  // Last node first, so that every use is gone before its value.
  for (auto it = target.nodes().reverse().begin(); it != target.nodes().reverse().end();) {
    torch::jit::Node* node = *it;
    ++it;
    node->destroy();
  }
  for (torch::jit::Value* output : torch::jit::insertGraph(target, source, target.inputs()))
    target.registerOutput(output);
}

}  // namespace

torch::jit::Module strip(const torch::jit::Module& module) {
  TORCH_CHECK(planOf(module), "jitckpt.strip: this module was not rewritten by jitckpt");
  auto original = module.find_method(kOriginalForward);
  TORCH_CHECK(original, "jitckpt.strip: this module was rewritten by an earlier jitckpt that kept ",
              "no copy of the original forward; strip the module you gave jitckpt.checkpoint ",
              "instead (it shares its parameters)");
  torch::jit::Module plain = module.clone(/*inplace=*/true);  // own class, shared tensors
  replaceGraphBody(*plain.get_method("forward").graph(),
                   *plain.get_method(kOriginalForward).graph());
  plain.type()->unsafeRemoveMethod(kOriginalForward);
  plain._ivalue()->unsafeRemoveAttr(kPlanAttribute);
  plain.type()->unsafeRemoveAttribute(kPlanAttribute);
  return plain;
}

}  // namespace jitckpt
