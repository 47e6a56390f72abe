// The kernels of jitckpt::chain (see chain_op.h).
#include "runtime/chain_op.h"

#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/graph_task.h>

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

// The chain's parameter gradients reach .grad through autograd, as the model's do, so they are
// all held until the chain's backward ends: while .grad is None they take the place .grad would;
// beside existing gradients they are extra.
void warnIfGradientsAreHeld(const std::vector<at::Tensor>& lifted) {
  int64_t bytes = 0;
  for (const auto& t : lifted) {
    if (t.defined() && t.requires_grad() && t.is_leaf() && t.grad().defined())
      bytes += static_cast<int64_t>(t.numel() * t.element_size());
  }
  if (bytes == 0) return;
  TORCH_WARN_ONCE(
      "jitckpt: the parameters of the checkpointed chain already hold gradients in "
      ".grad, so its backward holds up to ",
      bytes / (1 << 20),
      " MiB of new gradients until it hands them to autograd; zero gradients with "
      "zero_grad(set_to_none=True) (the default on PyTorch 2.x) to avoid that");
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
                "jitckpt::chain: backward ran twice through a checkpointed chain whose saved "
                "state the first backward freed; pass retain_graph=True to the first backward");
    auto executor = c10::static_intrusive_pointer_cast<ScheduleExecutor>(found->second.toCapsule());
    // Autograd runs backward with grad mode on exactly when create_graph=True.
    TORCH_CHECK(!c10::GradMode::is_enabled(),
                "jitckpt::chain: create_graph=True (double backward, as for gradient penalties) "
                "is not supported through a checkpointed chain: its gradients would not carry "
                "the graph of the unmodified model. Nothing of the chain was written to .grad; "
                "take that step on the module given to jitckpt.checkpoint (it shares its "
                "parameters with the rewritten one)");
    warnIfGradientsAreHeld(executor->arguments().lifted_tensors);
    variable_list grads;
    if (torch::autograd::get_current_graph_task_keep_graph()) {
      TORCH_WARN_ONCE(
          "jitckpt: a backward with retain_graph=True runs the checkpointed chain's forward "
          "again and differentiates it whole, holding all its activations as the unmodified "
          "model does: that backward saves no memory");
      grads = executor->runBackwardWholeGraph(grad_outputs);
    } else {
      ctx->saved_data.erase(found);
      grads = executor->runBackward(grad_outputs);
    }
    grads.push_back(at::Tensor());  // lifted_scalars
    grads.push_back(at::Tensor());  // plan
    return grads;
  }
};

// The buffers the chain's stages update in place (BatchNorm statistics), copied before a call, so
// that a call that fails part way (out of memory) leaves none of them half-updated.
class BufferRollback {
 public:
  BufferRollback(const ChainStages& stages, at::TensorList lifted_tensors) {
    for (int l = 1; l <= stages.size(); ++l) {
      for (size_t k : stages.stage(l).mutated_lifted) {
        if (stages.lifted()[k].kind == LiftedKind::Scalar) continue;
        const at::Tensor& live = lifted_tensors[stages.position(k)];
        if (live.defined()) saved_.emplace_back(live, live.detach().clone());
      }
    }
  }
  void restore() {
    at::NoGradGuard no_grad;
    for (auto& [live, copy] : saved_) live.detach().copy_(copy);
  }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
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
  BufferRollback rollback(plan->stages(), lifted_tensors);
  try {
    if (!c10::GradMode::is_enabled() ||
        !(anyRequiresGrad(inputs) || anyRequiresGrad(lifted_tensors))) {
      c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
      return chainInference(inputs, lifted_tensors, lifted_scalars, plan);
    }
    return ChainFunction::apply(inputs, lifted_tensors, lifted_scalars, plan);
  } catch (...) {  // out of memory, or any stage's error: the buffers go back to where they were
    rollback.restore();
    throw;
  }
}

std::vector<at::Tensor> chainInference(at::TensorList inputs, at::TensorList lifted_tensors,
                                       const c10::List<c10::IValue>& lifted_scalars,
                                       const c10::intrusive_ptr<Plan>& plan) {
  ScheduleExecutor executor(plan, argumentsOf(inputs, lifted_tensors, lifted_scalars));
  return executor.runInference();
}

}  // namespace jitckpt
