// The Replanner that libjitckpt installs in the runtime when it loads: profiles a plan's stages on
// the new arguments and solves them at the plan's limit and strategy (see runtime/replan.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "jitckpt/jitckpt.h"  // linkedLibrary
#include "passes/recut.h"
#include "planner/predicted_costs.h"
#include "planner/profile.h"
#include "planner/solve.h"
#include "runtime/chain_arguments.h"
#include "runtime/replan.h"

namespace jitckpt {
namespace {

// The stages a plan for `arguments` runs: a deferred plan's cut again by the bytes of its first
// call's tensors (recut.h), and kept for later calls, whose costs can then be predicted from
// those of the earlier ones; those of `at_least` when its sizes must hold too (its costs are
// merged with the new ones stage by stage); otherwise the planned stages (a given schedule is over
// those).
std::shared_ptr<const ChainStages> stagesToPlan(const Plan& planned,
                                                const ChainArguments& arguments,
                                                const Plan* at_least) {
  if (at_least) return at_least->sharedStages();
  const auto* source = dynamic_cast<const ForwardToCut*>(planned.stageSource().get());
  if (planned.deferred() && source && planned.solution().strategy != solver::Strategy::Given) {
    for (const auto& made : planned.variants().heldPlans())
      if (made->sharedStages() != planned.sharedStages()) return made->sharedStages();
    if (auto recut = recutStages(*source, planned.stages(), arguments)) return recut;
  }
  return planned.sharedStages();
}

class ProfilingReplanner final : public Replanner {
 public:
  c10::intrusive_ptr<Plan> replan(const Plan& planned, const ChainArguments& arguments,
                                  const Plan* at_least) const override {
    const Solution& old = planned.solution();
    // A deferred plan's first profile is the one the user waits for: shown on a terminal (or
    // when asked); the re-plans of a planned module stay quiet beside their warning.
    const bool shown = planned.deferred() && (planned.verbose() || isatty(STDERR_FILENO));
    ProfileOptions options;
    if (!shown) options.progress = [](int, int) {};
    options.measure_unconstrained_peak = false;
    options.whole_schedule_room =
        wholeScheduleRoom(old.requested_limit, arguments, /*in_training_call=*/true);
    options.repeats = old.profile_repeats;
    options.held_before_chain_bytes = arguments.held_before_chain_bytes;
    // A training call's profile is part of its step: one timed run of the whole chain scales the
    // stages' times (a factor moves no schedule: every schedule's time scales alike).
    options.calibration_runs = 1;
    const auto start = std::chrono::steady_clock::now();
    const std::shared_ptr<const ChainStages> stages = stagesToPlan(planned, arguments, at_least);
    const InputKey key = inputKey(planned.stages(), arguments, old.outside_parameters);
    // Profiles of these stages at other sizes: the costs predicted from them where they can say,
    // else the sizes measured and the times taken from them.
    const CostSamples measured = measuredCosts(planned, stages, key);
    std::optional<solver::Costs> predicted;
    const bool on_cuda = chainDevice(arguments).value_or(c10::Device(c10::kCPU)).is_cuda();
    if (!at_least) predicted = solver::predictCosts(measured.samples, measured.target, on_cuda);
    options.time_stages = at_least || measured.samples.empty();
    // Sizes alone, of stages that ran at other sizes before (the samples'): their graphs are past
    // TorchScript's profiling runs, so that a first run measures what later ones hold.
    if (!options.time_stages) options.warmup = 0;
    solver::Costs costs = predicted ? *predicted : profileStages(stages, arguments, options).costs;
    if (!predicted && !options.time_stages) solver::scaleTimes(measured.samples, costs);
    if (at_least) costs = solver::largestOf(costs, at_least->solution().costs);
    SolveOptions solve_options{old.strategy, old.slots, old.segments, old.given};
    // (the parameters outside the chain as they are now, where the plan knows them)
    const OutsideParameters& outside = old.outside_parameters;
    solve_options.epilogue_gradient_bytes =
        outside.known ? requiredGradientBytes(outside.after) : old.epilogue_gradient_bytes;
    solve_options.prologue_gradient_bytes =
        outside.known ? requiredGradientBytes(outside.before) : old.prologue_gradient_bytes;
    // Once one plan of this module was made, other shapes plan against what its limit meant
    // there, and a shape no schedule fits runs at its smallest rather than stopping training.
    solve_options.least_fraction_bytes = limitSoFar(planned);
    solve_options.smallest_when_infeasible = solve_options.least_fraction_bytes > 0;
    availableForActivations(old.requested_limit, arguments, old.outside_gradient_bytes,
                            solve_options);
    try {
      Solution solution = solveCosts(std::move(costs), old.requested_limit, solve_options, key);
      solution.outside_gradient_bytes = old.outside_gradient_bytes;
      solution.outside_parameters = old.outside_parameters;
      solution.profile_repeats = old.profile_repeats;
      solution.predicted = predicted.has_value();
      auto plan = c10::make_intrusive<Plan>(stages, std::move(solution));
      if (shown) {
        const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
        std::ostringstream line;  // (its own stream: precision is sticky)
        line << "jitckpt: planned for inputs [" << key.str() << "] in " << std::setprecision(3)
             << seconds.count() << " s" << (predicted ? " (costs predicted)" : "") << ": "
             << plan->numStages() << " stages, limit "
             << solver::formatBytes(plan->solution().memory_limit) << ", predicted peak "
             << solver::formatBytes(plan->solution().predicted_peak) << "\n";
        std::cerr << line.str();
      }
      return plan;
    } catch (const c10::Error& e) {
      const std::string message = e.what_without_backtrace();
      TORCH_CHECK(!at_least, "jitckpt: the memory limit ", old.requested_limit.toString(),
                  " cannot hold the chain at the larger sizes this call's data gives its tensors ",
                  "(inputs [", key.str(), "]): ", message,
                  ". Give a larger limit, or the limit as a fraction");
      if (planned.deferred() && message.find(key.str()) != std::string::npos) throw;
      TORCH_CHECK(!planned.deferred(), "jitckpt: planning for inputs [", key.str(),
                  "] at the limit ", old.requested_limit.toString(), ": ", message);
      TORCH_CHECK(false, "jitckpt: the memory limit ", old.requested_limit.toString(),
                  " cannot hold the chain at its new inputs [", key.str(), "] (planned for [",
                  old.input_key.str(), "]): ", message,
                  ". Re-run jitckpt.checkpoint with these inputs and a larger limit, or give "
                  "the limit as a fraction");
    }
  }
};

// Installed when the library loads, so that the runtime can re-plan in any process that has it.
const bool installed = [] {
  installReplanner(std::make_unique<ProfilingReplanner>());
  return true;
}();

}  // namespace

bool linkedLibrary() { return installed; }

}  // namespace jitckpt
