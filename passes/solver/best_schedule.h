// The schedule the optimal strategy runs: takes a Chain and a memory limit; returns the fastest
// schedule whose peak, replayed by the simulator with exact sizes, fits the limit, among the
// persistent DP's (solved at the limit's own resolution, slots of limit/S as in the paper) and the
// baselines (revolve-style, periodic with every segment count, no checkpointing). The DP rounds
// every size up to a slot, so near the smallest feasible limit a baseline can fit where the DP
// finds nothing, or run faster: taking the best keeps "optimal" never worse than a baseline under
// exact accounting. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "passes/solver/persistent_dp.h"

namespace jitckpt::solver {

struct BestSchedule {
  SolveResult result;  // infeasible: min_feasible_limit is the smallest limit any candidate needs
  std::string
      origin;  // "persistent DP", "revolve-style", "periodic (k segments)", "no checkpointing"
};

// segmented_stages: the stages periodic schedules segment (see periodicSchedule); -1 for all.
BestSchedule solveBest(const Chain& chain, int64_t limit, int slots = 500,
                       int segmented_stages = -1);

}  // namespace jitckpt::solver
