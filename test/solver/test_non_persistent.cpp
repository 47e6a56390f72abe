// Persistent vs all schedules: the search over every valid sequence (a shortest path over memory
// states) bounds the DP from below, and finds chains where persistence costs time (paper, 4.1).
#include <gtest/gtest.h>

#include "passes/solver/builtin_chains.h"
#include "passes/solver/exhaustive.h"
#include "passes/solver/persistent_dp.h"
#include "passes/solver/simulator.h"

using namespace jitckpt::solver;

TEST(NonPersistent, DpNeverBelowTheTrueOptimumNorWorseThanPersistentSearch) {
  double worst_gap = 0;
  int compared = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Chain chain = randomChain(2 + static_cast<int>(seed % 4), seed);
    const int64_t top = 60;
    PersistentSolver solver(chain, top, static_cast<int>(top));
    for (int64_t limit = 0; limit <= top; limit += 3) {
      const SearchResult any = bestAnySequence(chain, limit);
      const SolveResult dp = solver.solve(limit);
      if (!any.feasible) {
        EXPECT_FALSE(dp.feasible) << "seed " << seed << " limit " << limit;
        continue;
      }
      const SimulationResult sim = simulate(chain, any.schedule);
      ASSERT_TRUE(sim.valid && sim.complete && sim.peak <= limit) << sim.reason;
      EXPECT_EQ(sim.time, any.time);
      if (!dp.feasible) continue;
      ++compared;
      EXPECT_LE(any.time, dp.time) << "seed " << seed << " limit " << limit;
      if (any.time > 0) worst_gap = std::max(worst_gap, dp.time / any.time - 1);
    }
  }
  EXPECT_GT(compared, 100);
  RecordProperty("worst_dp_gap_percent", std::to_string(100 * worst_gap));
  std::printf("worst DP gap to the true optimum over %d cases: %.1f%%\n", compared, 100 * worst_gap);
}

// The paper's Figure 3 is under-specified: encoded literally under Table 1 (its text's sizes:
// wa = 1 except wa[2] = wa[L] = 2, or its figure's: 0,1,2,3..3,4; abar = a; zero delta; M = 8;
// uf[1] = n-1, uf[2] = 2) the persistent optimum equals the true optimum for n = 2..5, so
// 3n+1 against 2n+2 is not reproduced. The fact it illustrates is shown here instead.
//
// Persistent schedules are not always optimal: among small chains with small integer sizes, some
// have a non-persistent schedule strictly faster than every persistent one at the same limit.
TEST(NonPersistent, StrictlyFasterNonPersistentScheduleExists) {
  int found = 0;
  std::string example;
  for (uint64_t seed = 1; seed <= 400 && found < 3; ++seed) {
    const int length = 4 + static_cast<int>(seed % 3);
    const Chain chain = randomChain(length, seed, 4, 9);
    for (int64_t limit = 4; limit <= 40; ++limit) {
      const SearchResult persistent = bestPersistentSequence(chain, limit);
      if (!persistent.feasible) continue;
      const SearchResult any = bestAnySequence(chain, limit);
      ASSERT_TRUE(any.feasible);
      ASSERT_LE(any.time, persistent.time);
      if (any.time < persistent.time) {
        ++found;
        if (example.empty()) {
          example = "L=" + std::to_string(length) + " M=" + std::to_string(limit) + "\n" + chainToJson(chain) +
                    "\npersistent " + std::to_string(persistent.time) + ": " + toString(persistent.schedule) +
                    "\nany " + std::to_string(any.time) + ": " + toString(any.schedule);
        }
        break;
      }
    }
  }
  EXPECT_GE(found, 1);
  std::printf("%s\n", example.c_str());
}
