// The checkpoint API of jitckpt._C: checkpoint, dump, plan information and CPU memory counting.
// Modules cross as torch::jit::Module (torch's own pybind casters); the Python package wraps them
// back into ScriptModules. Registered by module.cpp through defineCheckpointApi.
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "bindings/forward_inputs.h"
#include "bindings/python_warnings.h"
#include "passes/strip.h"
#include "planner/checkpoint.h"
#include "planner/user_options.h"
#include "runtime/plan.h"
#include "runtime/probes/available_memory.h"
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

// The plan that holds a rewritten module's profile: its own, or, rewritten without example inputs,
// the one its last training call ran.
c10::intrusive_ptr<jitckpt::Plan> profiledPlan(const torch::jit::Module& module) {
  auto plan = requirePlan(module);
  if (plan->solution().costs.length() < 1) plan = plan->variants().lastUsed();
  TORCH_CHECK(plan,
              "this module has no profile yet: it was rewritten without example inputs and "
              "has not trained; train it once, or rewrite it with example inputs, to reuse "
              "its profile");
  return plan;
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

// The request from the user's options as text (planner/user_options.h) and the Python callables.
jitckpt::CheckpointRequest makeRequest(const std::map<std::string, std::string>& texts,
                                       py::object progress, py::object profile_progress,
                                       const std::string& costs_json,
                                       const std::string& costs_input_key) {
  jitckpt::CheckpointRequest request = jitckpt::makeRequest(texts);
  jitckpt::CheckpointOptions& options = request.options;
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
  options.costs_input_key = costs_input_key;
  return request;
}

// What the baselines would cost on the plan's chain, as the simulator predicts them: no
// checkpointing, and checkpoint_sequential with 2 to 2*sqrt(L) segments (jitckpt.plot marks them).
// (each peak raised to the plan's floor, as its own: gradients made after the chain's backward)
py::list baselinePoints(const jitckpt::solver::Costs& costs, int64_t after_backward_bytes) {
  namespace solver = jitckpt::solver;
  const int64_t floor = solver::peakFloor(costs, after_backward_bytes);
  py::list points;
  const int stages = costs.length() - 1;  // periodic schedules leave the terminal stage alone
  auto add = [&](const std::string& name, const solver::Schedule& schedule) {
    const auto result = solver::simulate(costs, schedule);
    // (none where it recomputes a stage that runs once: Costs::runs_once)
    if (result.valid && result.complete)
      points.append(py::make_tuple(name, std::max(result.peak, floor), result.time));
  };
  add("no checkpointing", solver::noCheckpointSchedule(costs));
  const int most = std::min(stages, static_cast<int>(std::ceil(2 * std::sqrt(stages))));
  for (int k = 2; k <= most; ++k)
    add("checkpoint_sequential, " + std::to_string(k) + " segments",
        solver::periodicSchedule(costs, k, stages));
  return points;
}

py::list variantsInfo(const jitckpt::Plan& plan) {
  py::list variants;
  for (const auto& variant : plan.variants().all()) {
    const jitckpt::Solution& v = variant->solution();
    py::dict entry;
    entry["input_shapes"] = v.input_key.shapes;
    entry["input_types"] = v.input_key.types;
    entry["memory_limit"] = v.memory_limit;
    entry["over_limit"] = v.over_limit;
    entry["predicted_costs"] = v.predicted;
    entry["predicted_peak"] = v.predicted_peak;
    entry["unconstrained_peak"] = v.unconstrained_peak;
    entry["schedule"] = jitckpt::solver::toString(v.schedule);
    variants.append(entry);
  }
  return variants;
}

py::dict solutionInfo(const jitckpt::Plan& plan) {
  const jitckpt::Solution& s = plan.solution();
  py::dict info;
  info["strategy"] = jitckpt::solver::toString(s.strategy);
  info["num_stages"] = plan.numStages();
  py::list labels;
  for (const auto& stage : plan.stages().stages()) labels.append(stage.label);
  info["labels"] = labels;
  info["stages_sized_by_data"] = plan.stages().stagesSizedByData();
  info["requested_limit"] = s.requested_limit.toString();
  info["slots"] = s.slots;
  if (s.deferred) return info;
  info["memory_limit"] = s.memory_limit;
  info["over_limit"] = s.over_limit;
  info["predicted_costs"] = s.predicted;
  info["predicted_peak"] = s.predicted_peak;
  info["predicted_time_ms"] = s.predicted_time;
  info["unconstrained_peak"] = s.unconstrained_peak;
  info["prologue_gradient_bytes"] = s.prologue_gradient_bytes;
  info["schedule"] = jitckpt::solver::toString(s.schedule);
  // The stages a training call runs as one (without autocast): [first, last] of each.
  const auto grouped = plan.chainToRun(jitckpt::RunAs::Grouped);
  py::list groups;
  for (size_t g = 0; g < grouped->first.size(); ++g) {
    groups.append(py::make_tuple(
        grouped->first[g], jitckpt::solver::lastStageOf(grouped->first, g, plan.numStages())));
  }
  info["stage_groups"] = groups;
  py::list curve;
  for (const auto& p : s.curve) curve.append(py::make_tuple(p.limit, p.time));
  info["curve"] = curve;
  info["baselines"] = baselinePoints(s.costs, s.prologue_gradient_bytes);
  py::dict costs;
  costs["uf"] = s.costs.uf;
  costs["uf_nograd"] = s.costs.uf_nograd.empty() ? s.costs.uf : s.costs.uf_nograd;
  costs["ub"] = s.costs.ub;
  costs["wa"] = s.costs.wa;
  costs["wabar"] = s.costs.wabar;
  costs["wd"] = s.costs.wd;
  costs["of"] = s.costs.of;
  costs["of_nograd"] = s.costs.of_nograd.empty() ? s.costs.of : s.costs.of_nograd;
  costs["ob"] = s.costs.ob;
  costs["wg"] = s.costs.wg.empty() ? std::vector<int64_t>(s.costs.uf.size(), 0) : s.costs.wg;
  costs["wd_handed"] =
      s.costs.wd_handed.empty() ? std::vector<int64_t>(s.costs.uf.size(), 0) : s.costs.wd_handed;
  std::vector<int64_t> passed;
  for (int l = 0; l <= s.costs.length(); ++l) passed.push_back(s.costs.passedBytes(l));
  costs["wpass"] = passed;
  py::list spans;
  for (const auto& span : s.costs.spans)
    spans.append(py::make_tuple(span.first, span.last, span.bytes));
  costs["spans"] = spans;
  costs["held_output"] = s.costs.held_output;
  costs["runs_once"] = s.costs.runs_once;
  info["costs"] = costs;
  info["input_shapes"] = s.input_key.shapes;
  info["input_types"] = s.input_key.types;
  return info;
}

// The plan the module's last call ran: its own, or one made for other inputs (deferred: before
// its first training call, what was asked, with no schedule).
py::dict planInfo(const torch::jit::Module& module) {
  auto plan = requirePlan(module);
  auto used = plan->variants().lastUsed();
  py::dict info = solutionInfo(used ? *used : *plan);
  info["deferred"] = plan->deferred();
  // The plans made since for other inputs (this process only; never saved).
  info["variants"] = variantsInfo(*plan);
  info["text"] = plan->str();
  return info;
}

}  // namespace

void defineCheckpointApi(py::module_& m) {
  m.def(
      "checkpoint",
      [](const torch::jit::Module& module, const py::object& example_inputs,
         const std::map<std::string, std::string>& options, py::object progress,
         py::object profile_progress, const std::string& costs_json,
         const std::string& costs_input_key, const std::vector<int>& copying_stages) {
        jitckpt::PythonWarnings warnings;
        auto request = makeRequest(options, std::move(progress), std::move(profile_progress),
                                   costs_json, costs_input_key);
        request.options.copying_stages = copying_stages;
        if (example_inputs.is_none()) {  // rewrite now, plan at the first training call
          py::gil_scoped_release no_gil;
          return jitckpt::checkpoint(module, request.limit, request.options);
        }
        const auto inputs =
            jitckpt::bindings::forwardInputs(module, py::cast<py::sequence>(example_inputs));
        py::gil_scoped_release no_gil;  // the autograd engine refuses to run while it is held
        return jitckpt::checkpoint(module, inputs, request.limit, request.options);
      },
      py::arg("module"), py::arg("example_inputs"), py::arg("options"), py::arg("progress"),
      py::arg("profile_progress") = py::none(), py::arg("costs_json") = "",
      py::arg("costs_input_key") = "", py::arg("copying_stages") = std::vector<int>{});
  // What the limit has meant for a rewritten module, carried to another rewrite of the same model
  // (export/checkpointed_module.py: a new capture).
  m.def("limit_so_far",
        [](const torch::jit::Module& module) { return jitckpt::limitSoFar(*requirePlan(module)); });
  m.def("hold_limit", [](const torch::jit::Module& module, int64_t bytes) {
    requirePlan(module)->variants().holdLimit(bytes);
  });
  // The options' names, defaults and help (planner/user_options.h): what the package's keywords
  // stand for.
  m.def("user_options", [] {
    std::vector<std::tuple<std::string, std::string, std::string>> options;
    for (const auto& o : jitckpt::userOptions())
      options.emplace_back(o.name, o.default_text, o.help);
    return options;
  });
  m.def(
      "_jit_pass_jitckpt_checkpoint",
      [](const torch::jit::Module& module, const std::string& memory_limit,
         const std::string& strategy) {
        jitckpt::PythonWarnings warnings;
        jitckpt::CheckpointOptions options;
        options.strategy = parseOption([&] { return jitckpt::solver::parseStrategy(strategy); });
        options.progress = [](const std::string&) {};
        const auto limit =
            parseOption([&] { return jitckpt::solver::MemoryLimit::parse(memory_limit); });
        return jitckpt::checkpoint(module, limit, options);
      },
      py::arg("module"), py::arg("memory_limit") = "0.5", py::arg("strategy") = "optimal",
      "Like torch._C._freeze_module: takes a torch._C.ScriptModule, returns a new one whose "
      "forward calls jitckpt::chain, planned at its first training call.");
  m.def("strip", [](const torch::jit::Module& module) { return jitckpt::strip(module); });
  m.def("costs_json", [](const torch::jit::Module& module) {
    return jitckpt::solver::costsToJson(profiledPlan(module)->solution().costs);
  });
  // The stages whose B copied a parameter's gradient to its layout (a profile's finding that
  // reuse_profile_of carries with the costs).
  m.def("copying_stages", [](const torch::jit::Module& module) {
    const auto& plan = *profiledPlan(module);
    std::vector<int> stages;
    for (int l = 1; l <= plan.numStages(); ++l) {
      if (plan.stages().copiesParameterGradients(l)) stages.push_back(l);
    }
    return stages;
  });
  // The inputs that profile was measured on (InputKey::str()).
  // (which parameters outside the chain are frozen is not the costs' business)
  m.def("profile_input_key", [](const torch::jit::Module& module) {
    jitckpt::InputKey key = profiledPlan(module)->solution().input_key;
    key.outside.clear();
    return key.str();
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
        [] { return jitckpt::probes::CountingAllocator::instance().outerPeakBytes(); });
  m.def("reset_cpu_memory_peak",
        [] { return jitckpt::probes::CountingAllocator::instance().resetOuterPeak(); });
  m.def("cpu_allocations",
        [] { return jitckpt::probes::CountingAllocator::instance().allocations(); });
  // Tests only: the available memory that memory_limit "auto" sees (-1: measure it again).
  m.def("set_available_memory_for_testing", &jitckpt::probes::setAvailableMemoryForTesting);
  // Tests only: the n-th CPU allocation from now fails (needs start_cpu_memory_counting).
  m.def("fail_cpu_allocation",
        [](int64_t n) { jitckpt::probes::CountingAllocator::instance().failAllocation(n); });
  // Tests only: CPU allocations count in whole blocks of this many bytes (512: as on CUDA).
  m.def("set_cpu_allocation_block_for_testing",
        [](int64_t bytes) { jitckpt::probes::CountingAllocator::instance().setBlockBytes(bytes); });
}
