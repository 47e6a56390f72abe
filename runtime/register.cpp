// Registers the runtime with TorchScript when libjitckpt_runtime loads: the jitckpt.Plan class
// (printable, picklable), the jitckpt::chain op with its kernels (chain_op.h), and the op that
// ends a stage's casts inside a group run under autocast (grouped_stages.h), and the ops that run
// a captured graph's autocast block (autocast_block.h) and its slices (indexing_slice.h), and the
// op that notes where a rewritten forward begins (forward_start.h).
#include <ATen/autocast_mode.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/library.h>

#include "runtime/autocast_block.h"
#include "runtime/chain_op.h"
#include "runtime/forward_start.h"
#include "runtime/grouped_stages.h"
#include "runtime/indexing_slice.h"
#include "runtime/plan.h"

namespace jitckpt {
namespace {

using PlanPtr = c10::intrusive_ptr<Plan>;

}  // namespace

TORCH_LIBRARY(jitckpt, m) {
  m.class_<Plan>("Plan")
      .def("__str__", [](const PlanPtr& self) { return self->str(); })
      .def("dump", [](const PlanPtr& self) { return self->str(); })
      .def("num_stages", [](const PlanPtr& self) { return int64_t{self->numStages()}; })
      .def("predicted_peak", [](const PlanPtr& self) { return self->solution().predicted_peak; })
      .def("predicted_time", [](const PlanPtr& self) { return self->solution().predicted_time; })
      .def("memory_limit", [](const PlanPtr& self) { return self->solution().memory_limit; })
      .def("strategy",
           [](const PlanPtr& self) { return solver::toString(self->solution().strategy); })
      .def("schedule",
           [](const PlanPtr& self) { return solver::toString(self->solution().schedule); })
      .def("unconstrained_peak",
           [](const PlanPtr& self) { return self->solution().unconstrained_peak; })
      .def("stage_labels",
           [](const PlanPtr& self) {
             std::vector<std::string> labels;
             for (const auto& s : self->stages().stages()) labels.push_back(s.label);
             return labels;
           })
      .def("curve_limits",
           [](const PlanPtr& self) {
             std::vector<int64_t> limits;
             for (const auto& p : self->solution().curve) limits.push_back(p.limit);
             return limits;
           })
      .def("curve_times",
           [](const PlanPtr& self) {
             std::vector<double> times;
             for (const auto& p : self->solution().curve) times.push_back(p.time);
             return times;
           })
      .def_pickle([](const PlanPtr& self) { return self->getState(); },
                  [](Plan::State state) { return Plan::fromState(std::move(state)); });
  m.def(
      torch::schema("chain(Tensor[] inputs, Tensor[] lifted_tensors, Any[] lifted_scalars, "
                    "__torch__.torch.classes.jitckpt.Plan plan) -> Tensor[]",
                    c10::AliasAnalysisKind::CONSERVATIVE));
  m.def("autocast_block(int block, Tensor[] inputs) -> Tensor[]");
  m.def(
      "indexing_slice(Tensor(a) self, int dim=0, int? start=None, int? end=None, int step=1) -> "
      "Tensor(a)");
}

namespace {
// Interpreter ops (no tensor to dispatch on); conservative, so that no pass drops or moves them.
const torch::jit::RegisterOperators end_of_stage_casts({torch::jit::Operator(
    std::string(kEndOfStageCasts) + "() -> ()",
    [](torch::jit::Stack&) { at::autocast::clear_cache(); },
    c10::AliasAnalysisKind::CONSERVATIVE)});
// Variadic: the interpreter pushes the number of arguments after them.
const torch::jit::RegisterOperators forward_begins({torch::jit::Operator(
    std::string(kForwardBegins) + "(...) -> ()",
    [](torch::jit::Stack& stack) {
      const auto count = static_cast<size_t>(torch::jit::pop(stack).toInt());
      std::vector<c10::IValue> arguments(stack.end() - static_cast<std::ptrdiff_t>(count),
                                         stack.end());
      torch::jit::drop(stack, count);
      beginForward(arguments);
    },
    c10::AliasAnalysisKind::CONSERVATIVE)});
}  // namespace

TORCH_LIBRARY_IMPL(jitckpt, Autograd, m) { m.impl("chain", chainAutograd); }
TORCH_LIBRARY_IMPL(jitckpt, CPU, m) { m.impl("chain", chainInference); }
TORCH_LIBRARY_IMPL(jitckpt, CUDA, m) { m.impl("chain", chainInference); }
TORCH_LIBRARY_IMPL(jitckpt, CompositeImplicitAutograd, m) {
  m.impl("autocast_block", runAutocastBlock);
  m.impl("indexing_slice", indexingSlice);
}

}  // namespace jitckpt
