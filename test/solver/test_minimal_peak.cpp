// minimalPeak against the exhaustive persistent search (the smallest limit any persistent sequence
// fits), against the table at one byte per slot, and on chains the searches cannot reach.
#include <gtest/gtest.h>

#include "solver/baselines.h"
#include "solver/minimal_peak.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"
#include "solver/testing/builtin_chains.h"
#include "solver/testing/exhaustive.h"

using namespace jitckpt::solver;

namespace {

int64_t noCheckpointPeak(const Costs& chain) {
  return simulate(chain, noCheckpointSchedule(chain)).peak;
}

// The smallest limit at which the exhaustive persistent search finds a sequence.
int64_t exhaustiveSmallestLimit(const Costs& chain) {
  for (int64_t limit = 0;; ++limit) {
    if (bestPersistentSequence(chain, limit).feasible) return limit;
  }
}

}  // namespace

TEST(MinimalPeak, EqualsTheExhaustiveSearchsSmallestLimit) {
  int below_none = 0;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    Costs chain = randomCosts(1 + static_cast<int>(seed % 6), seed);
    if (seed % 3 == 0) chain = withLongSpans(chain, seed);  // most of each input passed on
    if (seed % 2 == 0) {  // large gradients of activations: delta^t binds the forward runs
      for (int64_t& bytes : chain.wd) bytes *= 3;
    }
    SCOPED_TRACE("seed " + std::to_string(seed) + "\n" + costsToJson(chain));
    const MinimalPeak least = minimalPeak(chain);
    ASSERT_EQ(least.limit, exhaustiveSmallestLimit(chain));
    const SimulationResult sim = simulate(chain, least.schedule);
    ASSERT_TRUE(sim.valid && sim.complete) << sim.reason;
    EXPECT_EQ(sim.peak, least.limit);
    EXPECT_EQ(sim.time, least.time);
    // Not faster than the best sequence at that limit (its time is the simulator's)
    EXPECT_GE(least.time, bestPersistentSequence(chain, least.limit).time);
    if (least.limit < noCheckpointPeak(chain)) ++below_none;
  }
  EXPECT_GT(below_none, 150);
}

// At one byte per slot the table's first feasible limit is exact too: the two agree, with and
// without the revolve-style restriction, on chains too long to search.
TEST(MinimalPeak, EqualsTheTablesFirstFeasibleLimitAtOneBytePerSlot) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Costs chain = randomCosts(5 + static_cast<int>(seed % 20), seed, 30, 9);
    const int64_t top = noCheckpointPeak(chain) + 2;
    for (bool revolve_only : {false, true}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + (revolve_only ? " revolve" : ""));
      const PersistentSolver table(chain, top, static_cast<int>(top), revolve_only);
      ASSERT_EQ(table.slotSize(), 1);
      const MinimalPeak least = minimalPeak(chain, revolve_only);
      EXPECT_EQ(least.limit, table.minFeasibleLimit());
      EXPECT_TRUE(table.solve(least.limit).feasible);
      EXPECT_FALSE(table.solve(least.limit - 1).feasible);
    }
  }
}

// Nothing the slot tables or the baselines find goes below it, on a ResNet-sized chain.
TEST(MinimalPeak, NoTableOrBaselineGoesBelowIt) {
  const Costs chain = resnetLikeCosts(60);
  const MinimalPeak least = minimalPeak(chain);
  const int64_t none_peak = noCheckpointPeak(chain);
  EXPECT_LT(least.limit, none_peak / 4);
  for (int slots : {50, 500, 2000}) {
    const PersistentSolver table(chain, none_peak, slots);
    EXPECT_GE(table.minFeasibleLimit(), least.limit) << slots << " slots";
  }
  for (int k = 1; k <= chain.length(); ++k)
    EXPECT_GE(simulate(chain, periodicSchedule(chain, k)).peak, least.limit) << k << " segments";
}
