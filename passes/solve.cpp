// Solve step (see solve.h).
#include "passes/solve.h"

#include "solver/baselines.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"

namespace jitckpt {

Solution solveCosts(solver::Costs costs, const solver::MemoryLimit& limit,
                    const SolveOptions& options, InputKey input_key) {
  using solver::MemoryLimit;
  Solution s;
  s.costs = std::move(costs);
  s.strategy = options.strategy;
  s.slots = options.slots;
  s.input_key = std::move(input_key);
  s.requested_limit = limit;
  s.unconstrained_peak = solver::simulate(s.costs, solver::noCheckpointSchedule(s.costs)).peak;
  s.memory_limit = limit.kind == MemoryLimit::Kind::Unlimited ? s.unconstrained_peak
                                                              : limit.resolve(s.unconstrained_peak);
  // Periodic schedules segment the model's stages, not the terminal one.
  const int stages = s.costs.length() - 1;
  solver::Selection selection;
  try {
    selection = solver::selectSchedule(s.costs, s.memory_limit, options.strategy,
                                       {options.slots, options.segments, stages});
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, e.what());
  }
  TORCH_CHECK(selection.feasible, selection.message);
  s.schedule = std::move(selection.schedule);
  s.predicted_peak = selection.peak;
  s.predicted_time = selection.time;
  if (options.strategy == solver::Strategy::Optimal)
    s.curve = solver::optimalCurve(s.costs, options.slots);
  return s;
}

}  // namespace jitckpt
