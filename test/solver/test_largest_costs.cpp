// largestOf: the costs of a chain profiled on two sets of data whose tensors differ in size. Every
// schedule's simulated peak and time under them must be at least its peak and time under either,
// for any two chains of one length: the runtime re-plans with them where a call's data makes
// larger tensors than the plan's, and counts on the new plan to hold both.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "solver/baselines.h"
#include "solver/costs.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"
#include "solver/testing/builtin_chains.h"

using namespace jitckpt::solver;

namespace {

// Schedules valid for chains of this length: no checkpointing, periodic ones, and the optimal
// schedules of `chain` at a few limits.
std::vector<Schedule> schedulesFor(const Costs& chain) {
  std::vector<Schedule> schedules{noCheckpointSchedule(chain)};
  for (int segments = 2; segments <= std::min(4, chain.length()); ++segments)
    schedules.push_back(periodicSchedule(chain, segments));
  const int64_t peak = simulate(chain, schedules.front()).peak;
  const PersistentSolver solver(chain, peak, 60);
  for (const CurvePoint& point : solver.curve()) {
    const SolveResult result = solver.solve(point.limit);
    if (result.feasible) schedules.push_back(result.schedule);
  }
  return schedules;
}

void expectHoldsBoth(const Costs& a, const Costs& b, int* checked) {
  const Costs merged = largestOf(a, b);
  std::vector<Schedule> schedules = schedulesFor(a);
  for (Schedule& s : schedulesFor(b)) schedules.push_back(std::move(s));
  for (const Schedule& schedule : schedules) {
    const SimulationResult under_a = simulate(a, schedule);
    const SimulationResult under_b = simulate(b, schedule);
    const SimulationResult under_merged = simulate(merged, schedule);
    if (!under_a.valid || !under_b.valid) continue;
    ASSERT_TRUE(under_merged.valid) << under_merged.reason;
    EXPECT_GE(under_merged.peak, std::max(under_a.peak, under_b.peak)) << toString(schedule);
    EXPECT_GE(under_merged.time, std::max(under_a.time, under_b.time)) << toString(schedule);
    ++*checked;
  }
}

}  // namespace

TEST(LargestCosts, EverySchedulesPeakHoldsBothChains) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const int length = 2 + static_cast<int>(seed % 7);
    const Costs a = randomCosts(length, seed, 40, 9);
    const Costs b = randomCosts(length, seed + 1000, 40, 9);
    expectHoldsBoth(a, b, &checked);
    // The same chain with its storages shared otherwise, as another profile may find them.
    expectHoldsBoth(a, withLongSpans(a, seed), &checked);
    expectHoldsBoth(withLongSpans(a, seed), withLongSpans(b, seed + 7), &checked);
  }
  EXPECT_GT(checked, 1000);
}

TEST(LargestCosts, TakesEachSizeFromTheLargerAndEachSharedPartFromTheSmaller) {
  const Costs a = withLongSpans(randomCosts(6, 3, 40, 9), 3);
  Costs b = a;
  b.wa[2] += 10;
  b.wabar[2] += 10;
  b.ob[4] = a.ob[4] + 5;
  b.held_output = a.held_output + 1;
  const Costs merged = largestOf(a, b);
  EXPECT_EQ(merged.wa, b.wa);
  EXPECT_EQ(merged.ob[4], b.ob[4]);
  EXPECT_EQ(merged.held_output, b.held_output);
  EXPECT_EQ(merged.spans, a.spans);
  Costs fewer = a;
  fewer.spans.clear();
  EXPECT_TRUE(largestOf(a, fewer).spans.empty());
  EXPECT_EQ(largestOf(a, a).wa, a.wa);
}

TEST(LargestCosts, RefusesChainsOfOtherLengths) {
  EXPECT_THROW(largestOf(randomCosts(4, 1), randomCosts(5, 1)), std::invalid_argument);
}
