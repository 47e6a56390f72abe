// solveBest against the simulator, the baselines and the DP alone, on random chains at a coarse
// slot resolution (where the DP's rounding shows).
#include <gtest/gtest.h>

#include "passes/solver/baselines.h"
#include "passes/solver/best_schedule.h"
#include "passes/solver/builtin_chains.h"
#include "passes/solver/simulator.h"

using namespace jitckpt::solver;

namespace {

constexpr int kCoarseSlots = 20;

struct Candidate {
  Schedule schedule;
  std::string name;
};

std::vector<Candidate> baselines(const Chain& chain, int64_t limit) {
  std::vector<Candidate> out;
  const SolveResult revolve = solveRevolve(chain, limit, kCoarseSlots);
  if (revolve.feasible) out.push_back({revolve.schedule, "revolve"});
  for (int k = 1; k <= chain.length(); ++k) {
    out.push_back({periodicSchedule(chain, k), "periodic " + std::to_string(k)});
  }
  out.push_back({noCheckpointSchedule(chain), "none"});
  return out;
}

}  // namespace

TEST(BestSchedule, FitsTheLimitAndIsNeverSlowerThanAFittingCandidate) {
  int dp_alone_infeasible_but_best_feasible = 0, baseline_faster_than_dp = 0, infeasible = 0;
  for (uint64_t seed = 1; seed <= 80; ++seed) {
    const Chain chain = randomChain(3 + static_cast<int>(seed % 8), seed, 50, 20);
    const int64_t none_peak = simulate(chain, noCheckpointSchedule(chain)).peak;
    for (int64_t limit = none_peak / 5; limit <= none_peak;
         limit += std::max<int64_t>(1, none_peak / 40)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " limit " + std::to_string(limit));
      const BestSchedule best = solveBest(chain, limit, kCoarseSlots);
      const SolveResult dp = solveOptimal(chain, limit, kCoarseSlots);
      if (best.result.feasible) {
        const SimulationResult sim = simulate(chain, best.result.schedule);
        ASSERT_TRUE(sim.valid && sim.complete) << sim.reason;
        EXPECT_LE(sim.peak, limit);
        EXPECT_EQ(sim.peak, best.result.peak);
        EXPECT_DOUBLE_EQ(sim.time, best.result.time);
        EXPECT_FALSE(best.origin.empty());
      } else {
        ++infeasible;
        EXPECT_FALSE(dp.feasible);
        ASSERT_GT(best.result.min_feasible_limit, limit);
        EXPECT_TRUE(solveBest(chain, best.result.min_feasible_limit, kCoarseSlots).result.feasible)
            << "the smallest limit reported must work";
      }
      if (dp.feasible) {
        ASSERT_TRUE(best.result.feasible);
        EXPECT_LE(best.result.time, dp.time);
        if (best.result.time < dp.time) ++baseline_faster_than_dp;
      } else if (best.result.feasible) {
        ++dp_alone_infeasible_but_best_feasible;
      }
      for (const Candidate& c : baselines(chain, limit)) {
        const SimulationResult sim = simulate(chain, c.schedule);
        if (!sim.valid || !sim.complete || sim.peak > limit) continue;
        ASSERT_TRUE(best.result.feasible) << c.name << " fits";
        EXPECT_LE(best.result.time, sim.time) << c.name;
      }
    }
  }
  // The cases solveBest exists for do occur at this resolution, and so do infeasible limits.
  EXPECT_GT(dp_alone_infeasible_but_best_feasible + baseline_faster_than_dp, 0);
  EXPECT_GT(infeasible, 0);
}
