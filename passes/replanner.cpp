// The Replanner that libjitckpt installs in the runtime when it loads: profiles a plan's stages on
// the new arguments and solves them at the plan's limit and strategy (see runtime/replan.h).
#include "jitckpt/jitckpt.h"  // linkedLibrary
#include "passes/profile.h"
#include "passes/solve.h"
#include "runtime/replan.h"

namespace jitckpt {
namespace {

class ProfilingReplanner final : public Replanner {
 public:
  c10::intrusive_ptr<Plan> replan(const Plan& planned,
                                  const ChainArguments& arguments) const override {
    ProfileOptions options;
    options.progress = [](int, int) {};
    options.measure_unconstrained_peak = false;
    const Solution& old = planned.solution();
    solver::Costs costs = profileStages(planned.sharedStages(), arguments, options).costs;
    const InputKey key = inputKey(planned.stages(), arguments);
    try {
      return c10::make_intrusive<Plan>(
          planned.sharedStages(),
          solveCosts(std::move(costs), old.requested_limit, {old.strategy, old.slots, 0}, key));
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "jitckpt: the memory limit ", old.requested_limit.toString(),
                  " cannot hold the chain at its new inputs [", key.str(), "] (planned for [",
                  old.input_key.str(), "]): ", e.what_without_backtrace(),
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
