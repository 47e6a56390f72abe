// Solve step: takes a chain's profiled costs (with the terminal stage), a memory limit and the
// options; returns the Solution a Plan holds: the schedule that solver::selectSchedule picks, its
// predicted peak and time, and, for the optimal strategy, the whole time-memory curve. Errors
// (TORCH_CHECK) for an impossible limit name the smallest limit that works.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/plan.h"
#include "solver/costs.h"
#include "solver/memory_limit.h"
#include "solver/strategy.h"

namespace jitckpt {

struct SolveOptions {
  solver::Strategy strategy = solver::Strategy::Optimal;
  int slots = 500;   // memory slots of the DP
  int segments = 0;  // periodic: segment count; 0 picks the fastest that fits
};

Solution solveCosts(solver::Costs costs, const solver::MemoryLimit& limit,
                    const SolveOptions& options, InputKey input_key = {});

}  // namespace jitckpt
