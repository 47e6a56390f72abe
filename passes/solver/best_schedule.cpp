#include "passes/solver/best_schedule.h"

#include <algorithm>

#include "passes/solver/baselines.h"
#include "passes/solver/simulator.h"

namespace jitckpt::solver {

BestSchedule solveBest(const Chain& chain, int64_t limit, int slots, int segmented_stages) {
  BestSchedule best;
  best.result.limit = limit;
  int64_t smallest = -1;  // the smallest peak of any candidate, for the error message
  auto consider = [&](const Schedule& schedule, const std::string& origin) {
    const SimulationResult sim = simulate(chain, schedule);
    if (!sim.valid || !sim.complete) return;
    smallest = smallest < 0 ? sim.peak : std::min(smallest, sim.peak);
    if (sim.peak > limit || (best.result.feasible && sim.time >= best.result.time)) return;
    best.result.feasible = true;
    best.result.schedule = schedule;
    best.result.time = sim.time;
    best.result.peak = sim.peak;
    best.origin = origin;
  };
  auto considerSolved = [&](const SolveResult& solved, const std::string& origin) {
    if (solved.feasible) consider(solved.schedule, origin);
    // Infeasible: the DP's smallest limit (at its resolution) is a limit that works.
    if (!solved.feasible && solved.min_feasible_limit > 0) {
      smallest =
          smallest < 0 ? solved.min_feasible_limit : std::min(smallest, solved.min_feasible_limit);
    }
  };
  considerSolved(solveOptimal(chain, limit, slots), "persistent DP");
  considerSolved(solveRevolve(chain, limit, slots), "revolve-style");
  const int segmented = segmented_stages < 0 ? chain.length() : segmented_stages;
  for (int k = 1; k <= segmented; ++k) {
    consider(periodicSchedule(chain, k, segmented),
             "periodic (" + std::to_string(k) + " segments)");
  }
  consider(noCheckpointSchedule(chain), "no checkpointing");
  if (!best.result.feasible) {
    best.result.min_feasible_limit = smallest;
    best.result.message = "no schedule fits in " + std::to_string(limit) + " bytes";
    if (smallest > 0)
      best.result.message +=
          "; the smallest limit that works is " + std::to_string(smallest) + " bytes";
  }
  return best;
}

}  // namespace jitckpt::solver
