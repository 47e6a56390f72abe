// The kernels of jitckpt::chain (see chain_op.h).
#include "runtime/chain_op.h"

#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include "runtime/executor.h"
#include "runtime/replan.h"

namespace jitckpt {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

ChainArguments argumentsOf(at::TensorList inputs, at::TensorList lifted_tensors,
                           const c10::List<c10::IValue>& lifted_scalars) {
  ChainArguments arguments{inputs.vec(), lifted_tensors.vec(), {}};
  for (c10::IValue v : lifted_scalars) arguments.lifted_scalars.push_back(std::move(v));
  return arguments;
}

struct ChainFunction : public torch::autograd::Function<ChainFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               at::TensorList lifted_tensors, c10::List<c10::IValue> lifted_scalars,
                               c10::intrusive_ptr<Plan> plan) {
    ChainArguments arguments = argumentsOf(inputs, lifted_tensors, lifted_scalars);
    // Other input shapes than the planned ones get their own plan (made once).
    auto active = planForArguments(plan, arguments);
    auto executor = c10::make_intrusive<ScheduleExecutor>(active, std::move(arguments));
    variable_list outputs = executor->runForward();
    ctx->saved_data["executor"] = c10::IValue::make_capsule(executor);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto found = ctx->saved_data.find("executor");
    TORCH_CHECK(found != ctx->saved_data.end(),
                "jitckpt::chain: backward ran twice through a checkpointed chain; its saved state "
                "is freed by the first backward (retain_graph=True is not supported)");
    auto executor = c10::static_intrusive_pointer_cast<ScheduleExecutor>(found->second.toCapsule());
    ctx->saved_data.erase(found);
    variable_list grads = executor->runBackward(grad_outputs);
    grads.push_back(at::Tensor());  // lifted_scalars
    grads.push_back(at::Tensor());  // plan
    return grads;
  }
};

bool anyRequiresGrad(at::TensorList tensors) {
  for (const auto& t : tensors) {
    if (t.requires_grad()) return true;
  }
  return false;
}

}  // namespace

std::vector<at::Tensor> chainAutograd(at::TensorList inputs, at::TensorList lifted_tensors,
                                      const c10::List<c10::IValue>& lifted_scalars,
                                      const c10::intrusive_ptr<Plan>& plan) {
  if (!c10::GradMode::is_enabled() ||
      !(anyRequiresGrad(inputs) || anyRequiresGrad(lifted_tensors))) {
    c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
    return chainInference(inputs, lifted_tensors, lifted_scalars, plan);
  }
  return ChainFunction::apply(inputs, lifted_tensors, lifted_scalars, plan);
}

std::vector<at::Tensor> chainInference(at::TensorList inputs, at::TensorList lifted_tensors,
                                       const c10::List<c10::IValue>& lifted_scalars,
                                       const c10::intrusive_ptr<Plan>& plan) {
  ScheduleExecutor executor(plan, argumentsOf(inputs, lifted_tensors, lifted_scalars));
  return executor.runInference();
}

}  // namespace jitckpt
