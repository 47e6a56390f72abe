// Smallest peak of any persistent schedule, exact in bytes. Takes a Costs; returns the smallest
// memory limit that a persistent schedule (paper, Definition 1) fits, as the simulator counts
// memory, and a schedule that reaches it. O(L^3) and no memory axis: the persistent DP's
// feasibility alone (what its rows' first finite slot says, persistent_dp.h), at a resolution of
// one byte, which the time-memory table cannot afford. Standard C++ only.
//
// The schedule is the fastest that the recurrence builds from sub-schedules of smallest peak: a
// split whose peak is set by one part could give the other part more memory and run it faster,
// which only the time-memory table sees. selectSmallest (strategy.h) also asks tables built a
// few slots above this limit, whose schedules often reach it faster.
#pragma once

#include <cstdint>

#include "solver/costs.h"
#include "solver/schedule.h"

namespace jitckpt::solver {

struct MinimalPeak {
  // The smallest limit, bytes, a^0 included (as SolveResult::peak); -1 where no persistent
  // schedule exists (revolve-style, with a stage of Costs::runs_once before the last).
  int64_t limit = 0;
  Schedule schedule;  // its simulated peak is `limit`
  double time = 0;    // simulated
};

// revolve_only: only a^l checkpoints, an Fall before every B (PersistentSolver's option).
MinimalPeak minimalPeak(const Costs& chain, bool revolve_only = false);

}  // namespace jitckpt::solver
