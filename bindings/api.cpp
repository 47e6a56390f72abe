// The checkpoint API of jitckpt._C: checkpoint, dump, plan information and CPU memory counting.
// Modules cross as torch::jit::Module (torch's own pybind casters); the Python package wraps them
// back into ScriptModules. Registered by module.cpp through defineCheckpointApi.
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <sstream>

#include "passes/checkpoint.h"
#include "passes/solver/memory_size.h"
#include "runtime/plan.h"
#include "runtime/probes/counting_allocator.h"

namespace py = pybind11;

namespace {

c10::intrusive_ptr<jitckpt::Plan> planOf(const torch::jit::Module& module) {
  TORCH_CHECK(module.hasattr(jitckpt::kPlanAttribute),
              "this module was not rewritten by jitckpt: call jitckpt.checkpoint(module, ...) first");
  return module.attr(jitckpt::kPlanAttribute).toCustomClass<jitckpt::Plan>();
}

std::vector<c10::IValue> toIValues(const py::sequence& inputs) {
  std::vector<c10::IValue> values;
  for (const auto& item : inputs) values.push_back(torch::jit::toTypeInferredIValue(item));
  return values;
}

}  // namespace

void defineCheckpointApi(py::module_& m) {
  m.def(
      "checkpoint",
      [](const torch::jit::Module& module, const py::sequence& example_inputs, const std::string& memory_limit,
         const std::string& strategy, int slots, int max_stages, int segments, int profile_repeats,
         py::object progress, const std::string& costs_json) {
        jitckpt::CheckpointOptions options;
        options.slots = slots;
        options.strategy = jitckpt::parseStrategy(strategy);
        options.max_stages = max_stages;
        options.segments = segments;
        options.profile_repeats = profile_repeats;
        if (!progress.is_none()) {
          options.progress = [progress](const std::string& line) {
            py::gil_scoped_acquire gil;
            progress(line);
          };
        }
        if (!costs_json.empty()) options.costs = jitckpt::solver::chainFromJson(costs_json);
        const auto inputs = toIValues(example_inputs);
        const auto limit = jitckpt::MemoryLimit::parse(memory_limit);
        py::gil_scoped_release no_gil;  // the autograd engine refuses to run while it is held
        return jitckpt::checkpoint(module, inputs, limit, options);
      },
      py::arg("module"), py::arg("example_inputs"), py::arg("memory_limit"), py::arg("strategy"), py::arg("slots"),
      py::arg("max_stages"), py::arg("segments"), py::arg("profile_repeats"), py::arg("progress"),
      py::arg("costs_json") = "");
  m.def("costs_json", [](const torch::jit::Module& module) { return jitckpt::solver::chainToJson(planOf(module)->costs); });

  m.def("is_rewritten", [](const torch::jit::Module& module) { return module.hasattr(jitckpt::kPlanAttribute); });

  m.def("dump", [](const torch::jit::Module& module) {
    std::ostringstream os;
    os << module.get_method("forward").graph()->toString(false);
    os << "\n" << planOf(module)->str();
    return os.str();
  });

  m.def("plan_info", [](const torch::jit::Module& module) {
    auto plan = planOf(module);
    py::dict info;
    info["strategy"] = plan->strategy;
    info["num_stages"] = plan->numStages();
    info["memory_limit"] = plan->memory_limit;
    info["predicted_peak"] = plan->predicted_peak;
    info["predicted_time_ms"] = plan->predicted_time;
    info["unconstrained_peak"] = plan->unconstrained_peak;
    info["slots"] = plan->slots;
    info["schedule"] = jitckpt::solver::toString(plan->schedule);
    py::list curve;
    for (const auto& p : plan->curve) curve.append(py::make_tuple(p.limit, p.time));
    info["curve"] = curve;
    py::list labels;
    for (const auto& s : plan->stages) labels.append(s.label);
    info["labels"] = labels;
    py::dict costs;
    costs["uf"] = plan->costs.uf;
    costs["ub"] = plan->costs.ub;
    costs["wa"] = plan->costs.wa;
    costs["wabar"] = plan->costs.wabar;
    costs["wd"] = plan->costs.wd;
    costs["of"] = plan->costs.of;
    costs["ob"] = plan->costs.ob;
    info["costs"] = costs;
    info["input_shapes"] = plan->input_shapes;
    info["text"] = plan->str();
    return info;
  });

  m.def("format_bytes", &jitckpt::solver::formatBytes);
  // CPU memory counting for measurements from Python: installed once, kept for the process.
  m.def("start_cpu_memory_counting", [] {
    static auto* guard = new jitckpt::probes::CountingAllocatorGuard();
    (void)guard;
  });
  m.def("cpu_memory_live", [] { return jitckpt::probes::CountingAllocator::instance().currentBytes(); });
  m.def("cpu_memory_peak", [] { return jitckpt::probes::CountingAllocator::instance().peakBytes(); });
  m.def("reset_cpu_memory_peak", [] { return jitckpt::probes::CountingAllocator::instance().resetPeak(); });
}
