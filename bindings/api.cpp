// The checkpoint API of jitckpt._C: checkpoint, dump, plan information and CPU memory counting.
// Modules cross as torch::jit::Module (torch's own pybind casters); the Python package wraps them
// back into ScriptModules. Registered by module.cpp through defineCheckpointApi.
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "bindings/python_warnings.h"
#include "passes/checkpoint.h"
#include "runtime/plan.h"
#include "runtime/probes/counting_allocator.h"
#include "runtime/replan.h"
#include "solver/baselines.h"
#include "solver/memory_limit.h"
#include "solver/simulator.h"

namespace py = pybind11;

namespace {

c10::intrusive_ptr<jitckpt::Plan> requirePlan(const torch::jit::Module& module) {
  auto plan = jitckpt::planOf(module);
  TORCH_CHECK(
      plan, "this module was not rewritten by jitckpt: call jitckpt.checkpoint(module, ...) first");
  return plan;
}

std::vector<c10::IValue> toIValues(const py::sequence& inputs) {
  std::vector<c10::IValue> values;
  for (const auto& item : inputs) values.push_back(torch::jit::toTypeInferredIValue(item));
  return values;
}

// Parses with the solver's std::invalid_argument turned into a c10::Error (RuntimeError).
template <typename Parse>
auto parseOption(Parse parse) {
  try {
    return parse();
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, e.what());
  }
}

jitckpt::CheckpointOptions makeOptions(const std::string& strategy, int slots, int max_stages,
                                       int segments, int profile_repeats, py::object progress,
                                       py::object profile_progress, const std::string& costs_json) {
  jitckpt::CheckpointOptions options;
  options.slots = slots;
  options.strategy = parseOption([&] { return jitckpt::solver::parseStrategy(strategy); });
  options.max_stages = max_stages;
  options.segments = segments;
  options.profile_repeats = profile_repeats;
  if (!progress.is_none()) {
    options.progress = [progress](const std::string& line) {
      py::gil_scoped_acquire gil;
      progress(line);
    };
  }
  if (!profile_progress.is_none()) {
    options.profile_progress = [profile_progress](int stage, int stages) {
      py::gil_scoped_acquire gil;
      profile_progress(stage, stages);
    };
  }
  if (!costs_json.empty()) options.costs = jitckpt::solver::costsFromJson(costs_json);
  return options;
}

// What the baselines would cost on the plan's chain, as the simulator predicts them: no
// checkpointing, and checkpoint_sequential with 2 to 2*sqrt(L) segments (jitckpt.plot marks them).
py::list baselinePoints(const jitckpt::solver::Costs& costs) {
  namespace solver = jitckpt::solver;
  py::list points;
  const int stages = costs.length() - 1;  // periodic schedules leave the terminal stage alone
  auto add = [&](const std::string& name, const solver::Schedule& schedule) {
    const auto result = solver::simulate(costs, schedule);
    points.append(py::make_tuple(name, result.peak, result.time));
  };
  add("no checkpointing", solver::noCheckpointSchedule(costs));
  const int most = std::min(stages, static_cast<int>(std::ceil(2 * std::sqrt(stages))));
  for (int k = 2; k <= most; ++k)
    add("checkpoint_sequential, " + std::to_string(k) + " segments",
        solver::periodicSchedule(costs, k, stages));
  return points;
}

py::dict planInfo(const torch::jit::Module& module) {
  auto plan = requirePlan(module);
  const jitckpt::Solution& s = plan->solution();
  py::dict info;
  info["strategy"] = jitckpt::solver::toString(s.strategy);
  info["num_stages"] = plan->numStages();
  info["memory_limit"] = s.memory_limit;
  info["predicted_peak"] = s.predicted_peak;
  info["predicted_time_ms"] = s.predicted_time;
  info["unconstrained_peak"] = s.unconstrained_peak;
  info["slots"] = s.slots;
  info["schedule"] = jitckpt::solver::toString(s.schedule);
  py::list curve;
  for (const auto& p : s.curve) curve.append(py::make_tuple(p.limit, p.time));
  info["curve"] = curve;
  info["baselines"] = baselinePoints(s.costs);
  py::list labels;
  for (const auto& stage : plan->stages().stages()) labels.append(stage.label);
  info["labels"] = labels;
  py::dict costs;
  costs["uf"] = s.costs.uf;
  costs["ub"] = s.costs.ub;
  costs["wa"] = s.costs.wa;
  costs["wabar"] = s.costs.wabar;
  costs["wd"] = s.costs.wd;
  costs["of"] = s.costs.of;
  costs["ob"] = s.costs.ob;
  info["costs"] = costs;
  info["input_shapes"] = s.input_key.shapes;
  info["input_types"] = s.input_key.types;
  info["requested_limit"] = s.requested_limit.toString();
  // The plans made since for other inputs (this process only; never saved).
  py::list variants;
  for (const auto& variant : plan->variants().all()) {
    const jitckpt::Solution& v = variant->solution();
    py::dict entry;
    entry["input_shapes"] = v.input_key.shapes;
    entry["input_types"] = v.input_key.types;
    entry["memory_limit"] = v.memory_limit;
    entry["predicted_peak"] = v.predicted_peak;
    entry["unconstrained_peak"] = v.unconstrained_peak;
    entry["schedule"] = jitckpt::solver::toString(v.schedule);
    variants.append(entry);
  }
  info["variants"] = variants;
  info["text"] = plan->str();
  return info;
}

}  // namespace

void defineCheckpointApi(py::module_& m) {
  m.def(
      "checkpoint",
      [](const torch::jit::Module& module, const py::sequence& example_inputs,
         const std::string& memory_limit, const std::string& strategy, int slots, int max_stages,
         int segments, int profile_repeats, py::object progress, py::object profile_progress,
         const std::string& costs_json) {
        jitckpt::PythonWarnings warnings;
        const auto options =
            makeOptions(strategy, slots, max_stages, segments, profile_repeats, std::move(progress),
                        std::move(profile_progress), costs_json);
        const auto inputs = toIValues(example_inputs);
        const auto limit =
            parseOption([&] { return jitckpt::solver::MemoryLimit::parse(memory_limit); });
        py::gil_scoped_release no_gil;  // the autograd engine refuses to run while it is held
        return jitckpt::checkpoint(module, inputs, limit, options);
      },
      py::arg("module"), py::arg("example_inputs"), py::arg("memory_limit"), py::arg("strategy"),
      py::arg("slots"), py::arg("max_stages"), py::arg("segments"), py::arg("profile_repeats"),
      py::arg("progress"), py::arg("profile_progress") = py::none(), py::arg("costs_json") = "");
  m.def("costs_json", [](const torch::jit::Module& module) {
    return jitckpt::solver::costsToJson(requirePlan(module)->solution().costs);
  });
  m.def("is_rewritten",
        [](const torch::jit::Module& module) { return bool(jitckpt::planOf(module)); });
  m.def("dump", [](const torch::jit::Module& module) {
    auto plan = requirePlan(module);
    std::ostringstream os;
    os << module.get_method("forward").graph()->toString(false);
    os << "\n" << plan->str();
    return os.str();
  });
  m.def("plan_info", &planInfo);
  m.def("format_bytes", &jitckpt::solver::formatBytes);
  // CPU memory counting for measurements from Python: installed once, kept for the process.
  m.def("start_cpu_memory_counting", [] {
    static auto* guard = new jitckpt::probes::CountingAllocatorGuard();
    (void)guard;
  });
  m.def("cpu_memory_live",
        [] { return jitckpt::probes::CountingAllocator::instance().currentBytes(); });
  m.def("cpu_memory_peak",
        [] { return jitckpt::probes::CountingAllocator::instance().peakBytes(); });
  m.def("reset_cpu_memory_peak",
        [] { return jitckpt::probes::CountingAllocator::instance().resetPeak(); });
  m.def("cpu_allocations",
        [] { return jitckpt::probes::CountingAllocator::instance().allocations(); });
  // Tests only: the n-th CPU allocation from now fails (needs start_cpu_memory_counting).
  m.def("fail_cpu_allocation",
        [](int64_t n) { jitckpt::probes::CountingAllocator::instance().failAllocation(n); });
}
