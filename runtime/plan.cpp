// Plan: validation and printing (see plan.h).
#include "runtime/plan.h"

#include <cstdio>
#include <sstream>

#include "runtime/replan.h"
#include "solver/baselines.h"
#include "solver/memory_limit.h"
#include "solver/simulator.h"

namespace jitckpt {

struct RunnableChains {
  std::mutex mutex;
  std::shared_ptr<const GroupedChain> chains[4];  // one per RunAs
};

Plan::Plan(std::shared_ptr<const ChainStages> stages, Solution solution)
    : stages_(std::move(stages)),
      solution_(std::move(solution)),
      variants_(std::make_shared<PlanVariants>()),
      runnable_(std::make_shared<RunnableChains>()) {
  TORCH_CHECK(stages_ && stages_->size() > 0, "jitckpt plan has no stages");
  if (solution_.deferred) return;
  const solver::Costs& costs = solution_.costs;
  TORCH_CHECK(costs.length() == numStages() + 1, "jitckpt plan: costs describe ", costs.length(),
              " stages but the plan has ", numStages(), " stages plus the terminal one");
  const solver::SimulationResult sim = solver::simulate(costs, solution_.schedule);
  TORCH_CHECK(sim.valid && sim.complete, "jitckpt plan: the schedule is not valid for this chain (",
              sim.valid ? "it does not reach the input gradient" : sim.reason,
              "); re-run jitckpt.checkpoint to make a new plan");
  // The forward part ends at the first B, which must be the terminal stage's.
  for (const auto& op : solution_.schedule) {
    if (op.kind != solver::OpKind::Backward) continue;
    TORCH_CHECK(op.stage == numStages() + 1, "jitckpt plan: the first backward op is ",
                solver::toString(op), ", expected B(", numStages() + 1,
                ") (the hand-off to autograd)");
    break;
  }
}

std::shared_ptr<const GroupedChain> Plan::chainToRun(RunAs how) const {
  std::lock_guard<std::mutex> lock(runnable_->mutex);
  auto& chain = runnable_->chains[static_cast<int>(how)];
  if (chain) return chain;
  switch (how) {
    case RunAs::EveryStage: {
      std::vector<int> first(static_cast<size_t>(numStages()));
      for (int l = 1; l <= numStages(); ++l) first[l - 1] = l;
      chain =
          std::make_shared<const GroupedChain>(GroupedChain{stages_, solution_.schedule, first});
      break;
    }
    case RunAs::Grouped:
    case RunAs::GroupedUnderAutocast:
      TORCH_INTERNAL_ASSERT(!solution_.deferred, "jitckpt: a deferred plan has no schedule to run");
      chain = std::make_shared<const GroupedChain>(
          groupStages(stages_, solution_.schedule,
                      how == RunAs::Grouped ? StageCasts::Shared : StageCasts::EndWithEachStage));
      break;
    case RunAs::Inference: {
      // Straight through: the schedule of no checkpointing groups every stage that may join.
      chain = std::make_shared<const GroupedChain>(
          groupStages(stages_, solver::noCheckpointScheduleOfLength(numStages() + 1)));
      break;
    }
  }
  return chain;
}

namespace {

std::string formatMilliseconds(double ms) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g ms", ms);
  return buffer;
}

}  // namespace

Solution deferredSolution(const solver::MemoryLimit& limit, solver::Strategy strategy, int slots,
                          int segments, solver::Schedule given) {
  Solution s;
  s.deferred = true;
  s.requested_limit = limit;
  s.strategy = strategy;
  s.slots = slots;
  s.segments = segments;
  s.given = std::move(given);
  return s;
}

std::string Plan::str() const {
  const Solution& s = solution_;
  std::ostringstream os;
  os << "jitckpt.Plan: " << numStages() << " stages, strategy " << solver::toString(s.strategy);
  if (s.deferred) {
    os << ", limit " << s.requested_limit.toString()
       << "; planned at the first training call for its inputs (once per input shapes, dtypes "
          "and devices)\n";
  } else {
    os << ", limit " << solver::formatBytes(s.memory_limit) << ", predicted peak "
       << solver::formatBytes(s.predicted_peak) << ", predicted time "
       << formatMilliseconds(s.predicted_time) << "\n";
  }
  for (int l = 1; l <= numStages(); ++l) {
    const StageSpec& stage = stages_->stage(l);
    os << "  stage " << l << " \"" << stage.label << "\": " << stage.num_activation_inputs
       << " input(s)";
    if (!s.deferred) {
      os << ", a " << solver::formatBytes(s.costs.wa[l]) << ", abar "
         << solver::formatBytes(s.costs.wabar[l]);
      if (s.costs.passedBytes(l) > 0)
        os << " (" << solver::formatBytes(s.costs.passedBytes(l)) << " passed through)";
      os << ", F " << formatMilliseconds(s.costs.uf[l]) << " (no grad "
         << formatMilliseconds(s.costs.noGradForward(l)) << ")"
         << ", B " << formatMilliseconds(s.costs.ub[l]);
    }
    if (stage.writes_activation_input) os << ", writes its input";
    if (stages_->hasRandomOps(l)) os << ", random";
    if (!stage.mutated_lifted.empty()) os << ", updates buffers";
    os << "\n";
  }
  if (s.deferred) {
    for (const auto& variant : variants_->all())
      os << "for inputs [" << variant->solution().input_key.str() << "]: " << variant->str();
    return os.str();
  }
  os << "  stage " << numStages() + 1 << " (terminal): hand-off to autograd\n";
  os << "schedule: " << solver::toString(s.schedule) << "\n";
  return os.str();
}

c10::ClassTypePtr planType() {
  return torch::getCustomClass("__torch__.torch.classes.jitckpt.Plan");
}

c10::intrusive_ptr<Plan> planOf(const torch::jit::Module& module) {
  if (!module.hasattr(kPlanAttribute)) return {};
  const c10::IValue value = module.attr(kPlanAttribute);
  return value.isCustomClass() ? value.toCustomClass<Plan>() : c10::intrusive_ptr<Plan>();
}

}  // namespace jitckpt
