// Exhaustive searches for small chains, used to test the DP: the best persistent sequence
// (enumerated by its recursive structure and evaluated by the simulator, not by the DP's
// formulas), and the best of ALL valid sequences, persistent or not (a shortest path over memory
// states using Table 1's ops; chains without spans, whose memory is a function of that state).
// Torch-free; exponential: for chains of up to about 7 stages.
#pragma once

#include <cstdint>

#include "solver/costs.h"
#include "solver/schedule.h"

namespace jitckpt::solver {

struct SearchResult {
  bool feasible = false;
  Schedule schedule;
  double time = 0;
  int64_t peak = 0;
};

SearchResult bestPersistentSequence(const Costs& chain, int64_t limit);
SearchResult bestAnySequence(const Costs& chain, int64_t limit);

}  // namespace jitckpt::solver
