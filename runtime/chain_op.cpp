// The jitckpt::chain op and the jitckpt.Plan class, registered with TORCH_LIBRARY(jitckpt).
// chain(Tensor[] inputs, Tensor[] lifted_tensors, Any[] lifted_scalars, Plan plan) -> Tensor[]
// The Autograd kernel wraps the executor in an autograd Function (its forward runs the schedule
// up to the first B, its backward the rest); with grad disabled, or nothing requiring grad, and on
// the backend keys (inference mode), the stages run straight through and nothing is saved.
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "runtime/executor.h"
#include "runtime/plan.h"

namespace jitckpt {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<c10::IValue> toVector(const c10::List<c10::IValue>& list) {
  std::vector<c10::IValue> out;
  for (const c10::IValue& v : list) out.push_back(v);
  return out;
}

struct ChainFunction : public torch::autograd::Function<ChainFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               at::TensorList lifted_tensors, c10::List<c10::IValue> lifted_scalars,
                               c10::intrusive_ptr<Plan> plan) {
    // Other input shapes than the planned ones get their own plan (profiled and solved once).
    auto active = plan->forInputs(inputs.vec(), lifted_tensors.vec(), toVector(lifted_scalars));
    auto executor = c10::make_intrusive<ChainExecutor>(active, inputs.vec(), lifted_tensors.vec(),
                                                       toVector(lifted_scalars));
    variable_list outputs = executor->runForward();
    ctx->saved_data["executor"] = c10::IValue::make_capsule(executor);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto found = ctx->saved_data.find("executor");
    TORCH_CHECK(found != ctx->saved_data.end(),
                "jitckpt::chain: backward ran twice through a checkpointed "
                "chain; its saved state is freed by the first backward (retain_graph=True is not "
                "supported)");
    auto executor = c10::static_intrusive_pointer_cast<ChainExecutor>(found->second.toCapsule());
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

std::vector<at::Tensor> chainAutograd(at::TensorList inputs, at::TensorList lifted_tensors,
                                      const c10::List<c10::IValue>& lifted_scalars,
                                      const c10::intrusive_ptr<Plan>& plan) {
  if (!c10::GradMode::is_enabled() ||
      !(anyRequiresGrad(inputs) || anyRequiresGrad(lifted_tensors))) {
    c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
    ChainExecutor executor(plan, inputs.vec(), lifted_tensors.vec(), toVector(lifted_scalars));
    return executor.runInference();
  }
  return ChainFunction::apply(inputs, lifted_tensors, lifted_scalars, plan);
}

std::vector<at::Tensor> chainInference(at::TensorList inputs, at::TensorList lifted_tensors,
                                       const c10::List<c10::IValue>& lifted_scalars,
                                       const c10::intrusive_ptr<Plan>& plan) {
  ChainExecutor executor(plan, inputs.vec(), lifted_tensors.vec(), toVector(lifted_scalars));
  return executor.runInference();
}

}  // namespace

TORCH_LIBRARY(jitckpt, m) {
  m.class_<Plan>("Plan")
      .def("__str__", [](const c10::intrusive_ptr<Plan>& self) { return self->str(); })
      .def("dump", [](const c10::intrusive_ptr<Plan>& self) { return self->str(); })
      .def("num_stages",
           [](const c10::intrusive_ptr<Plan>& self) {
             return static_cast<int64_t>(self->numStages());
           })
      .def("predicted_peak",
           [](const c10::intrusive_ptr<Plan>& self) { return self->predicted_peak; })
      .def("predicted_time",
           [](const c10::intrusive_ptr<Plan>& self) { return self->predicted_time; })
      .def("memory_limit", [](const c10::intrusive_ptr<Plan>& self) { return self->memory_limit; })
      .def("strategy", [](const c10::intrusive_ptr<Plan>& self) { return self->strategy; })
      .def("schedule",
           [](const c10::intrusive_ptr<Plan>& self) { return solver::toString(self->schedule); })
      .def("unconstrained_peak",
           [](const c10::intrusive_ptr<Plan>& self) { return self->unconstrained_peak; })
      .def("stage_labels",
           [](const c10::intrusive_ptr<Plan>& self) {
             std::vector<std::string> labels;
             for (const auto& s : self->stages) labels.push_back(s.label);
             return labels;
           })
      .def("curve_limits",
           [](const c10::intrusive_ptr<Plan>& self) {
             std::vector<int64_t> limits;
             for (const auto& p : self->curve) limits.push_back(p.limit);
             return limits;
           })
      .def("curve_times",
           [](const c10::intrusive_ptr<Plan>& self) {
             std::vector<double> times;
             for (const auto& p : self->curve) times.push_back(p.time);
             return times;
           })
      .def_pickle([](const c10::intrusive_ptr<Plan>& self) { return self->getState(); },
                  [](Plan::State state) { return Plan::fromState(std::move(state)); });
  m.def(
      torch::schema("chain(Tensor[] inputs, Tensor[] lifted_tensors, Any[] lifted_scalars, "
                    "__torch__.torch.classes.jitckpt.Plan plan) -> Tensor[]",
                    c10::AliasAnalysisKind::CONSERVATIVE));
}

TORCH_LIBRARY_IMPL(jitckpt, Autograd, m) { m.impl("chain", chainAutograd); }
TORCH_LIBRARY_IMPL(jitckpt, CPU, m) { m.impl("chain", chainInference); }
TORCH_LIBRARY_IMPL(jitckpt, CUDA, m) { m.impl("chain", chainInference); }

}  // namespace jitckpt
