// selectSchedule (optimal) against the simulator, the baselines and the DP alone, on random chains
// at a coarse slot resolution (where the DP's rounding shows).
#include <gtest/gtest.h>

#include "solver/baselines.h"
#include "solver/minimal_peak.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"
#include "solver/strategy.h"
#include "solver/testing/builtin_chains.h"

using namespace jitckpt::solver;

namespace {

constexpr int kCoarseSlots = 20;

struct Candidate {
  Schedule schedule;
  std::string name;
};

std::vector<Candidate> baselines(const Costs& chain, int64_t limit) {
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
    const Costs chain = randomCosts(3 + static_cast<int>(seed % 8), seed, 50, 20);
    const int64_t none_peak = simulate(chain, noCheckpointSchedule(chain)).peak;
    for (int64_t limit = none_peak / 5; limit <= none_peak;
         limit += std::max<int64_t>(1, none_peak / 40)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " limit " + std::to_string(limit));
      const Selection best = selectSchedule(chain, limit, Strategy::Optimal, {kCoarseSlots});
      const SolveResult dp = solveOptimal(chain, limit, kCoarseSlots);
      if (best.feasible) {
        const SimulationResult sim = simulate(chain, best.schedule);
        ASSERT_TRUE(sim.valid && sim.complete) << sim.reason;
        EXPECT_LE(sim.peak, limit);
        EXPECT_EQ(sim.peak, best.peak);
        EXPECT_DOUBLE_EQ(sim.time, best.time);
        EXPECT_FALSE(best.origin.empty());
      } else {
        ++infeasible;
        EXPECT_FALSE(dp.feasible);
        ASSERT_GT(best.min_feasible_limit, limit);
        EXPECT_TRUE(
            selectSchedule(chain, best.min_feasible_limit, Strategy::Optimal, {kCoarseSlots})
                .feasible)
            << "the smallest limit reported must work";
      }
      if (dp.feasible) {
        ASSERT_TRUE(best.feasible);
        EXPECT_LE(best.time, dp.time);
        if (best.time < dp.time) ++baseline_faster_than_dp;
      } else if (best.feasible) {
        ++dp_alone_infeasible_but_best_feasible;
      }
      for (const Candidate& c : baselines(chain, limit)) {
        const SimulationResult sim = simulate(chain, c.schedule);
        if (!sim.valid || !sim.complete || sim.peak > limit) continue;
        ASSERT_TRUE(best.feasible) << c.name << " fits";
        EXPECT_LE(best.time, sim.time) << c.name;
      }
    }
  }
  // The cases the selection exists for do occur at this resolution, and so do infeasible limits.
  EXPECT_GT(dp_alone_infeasible_but_best_feasible + baseline_faster_than_dp, 0);
  EXPECT_GT(infeasible, 0);
}

TEST(Strategy, PeriodicIsTheFastestFittingSegmentCount) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const Costs chain = randomCosts(4 + static_cast<int>(seed % 6), seed, 50, 20);
    const int64_t none_peak = simulate(chain, noCheckpointSchedule(chain)).peak;
    for (int64_t limit = none_peak / 4; limit <= none_peak; limit += none_peak / 8 + 1) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " limit " + std::to_string(limit));
      double fastest = -1;
      for (int k = 1; k <= chain.length(); ++k) {
        const SimulationResult sim = simulate(chain, periodicSchedule(chain, k));
        if (sim.peak <= limit && (fastest < 0 || sim.time < fastest)) fastest = sim.time;
      }
      const Selection periodic = selectSchedule(chain, limit, Strategy::Periodic);
      ASSERT_EQ(periodic.feasible, fastest >= 0) << periodic.message;
      if (periodic.feasible) {
        EXPECT_DOUBLE_EQ(periodic.time, fastest);
      } else {
        EXPECT_NE(periodic.message.find("smallest limit that works"), std::string::npos);
      }
    }
  }
}

TEST(Strategy, FixedSegmentsAndNoneAreCheckedAgainstTheLimit) {
  const Costs chain = randomCosts(6, 7, 50, 20);
  const SimulationResult none = simulate(chain, noCheckpointSchedule(chain));
  const Selection unlimited = selectSchedule(chain, none.peak, Strategy::None);
  ASSERT_TRUE(unlimited.feasible);
  EXPECT_EQ(unlimited.schedule, noCheckpointSchedule(chain));
  const Selection below = selectSchedule(chain, none.peak - 1, Strategy::None);
  EXPECT_FALSE(below.feasible);
  EXPECT_EQ(below.min_feasible_limit, none.peak);
  const Selection two = selectSchedule(chain, none.peak, Strategy::Periodic, {500, 2});
  ASSERT_TRUE(two.feasible);
  EXPECT_EQ(two.schedule, periodicSchedule(chain, 2));
  EXPECT_THROW(selectSchedule(chain, none.peak, Strategy::Periodic, {500, 7}),
               std::invalid_argument);
  EXPECT_EQ(parseStrategy(toString(Strategy::Revolve)), Strategy::Revolve);
  EXPECT_THROW(parseStrategy("fastest"), std::invalid_argument);
}

// "min": the exact smallest limit (minimalPeak, itself held to the exhaustive search), a schedule
// that fits it and is never slower than the candidates there, and selectSchedule agreeing on both
// sides of that limit: below it nothing, with the limit named; at it, a schedule.
TEST(Strategy, SmallestIsExactAndSelectScheduleAgrees) {
  int table_or_baseline_won = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const Costs chain = randomCosts(3 + static_cast<int>(seed % 12), seed, 50, 20);
    SCOPED_TRACE("seed " + std::to_string(seed));
    for (Strategy strategy : {Strategy::Optimal, Strategy::Revolve}) {
      const SelectOptions coarse{kCoarseSlots};
      const MinimalPeak least = minimalPeak(chain, strategy == Strategy::Revolve);
      const Selection smallest = selectSmallest(chain, strategy, coarse);
      ASSERT_TRUE(smallest.feasible);
      const SimulationResult sim = simulate(chain, smallest.schedule);
      ASSERT_TRUE(sim.valid && sim.complete) << sim.reason;
      EXPECT_EQ(sim.peak, least.limit);
      EXPECT_EQ(smallest.peak, least.limit);
      EXPECT_LE(smallest.time, least.time);
      if (smallest.time < least.time) ++table_or_baseline_won;
      const Selection below = selectSchedule(chain, least.limit - 1, strategy, coarse);
      EXPECT_FALSE(below.feasible);
      EXPECT_EQ(below.min_feasible_limit, least.limit);
      const Selection at = selectSchedule(chain, least.limit, strategy, coarse);
      ASSERT_TRUE(at.feasible) << at.message;
      EXPECT_LE(at.time, least.time);
    }
    EXPECT_LE(minimalPeak(chain).limit, minimalPeak(chain, true).limit);
    // Periodic and none: the smallest peak of their own schedules.
    int64_t periodic_least = -1;
    for (int k = 1; k <= chain.length(); ++k) {
      const int64_t peak = simulate(chain, periodicSchedule(chain, k)).peak;
      periodic_least = periodic_least < 0 ? peak : std::min(periodic_least, peak);
    }
    EXPECT_EQ(selectSmallest(chain, Strategy::Periodic).peak, periodic_least);
    EXPECT_GE(periodic_least, minimalPeak(chain).limit);
    EXPECT_EQ(selectSmallest(chain, Strategy::None).peak,
              simulate(chain, noCheckpointSchedule(chain)).peak);
  }
  EXPECT_GT(table_or_baseline_won, 0);
}

// Where no checkpointing fits, the selection is no checkpointing without a table, and the table
// agrees that nothing is faster there.
TEST(Strategy, NoCheckpointingWhereItFits) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Costs chain = randomCosts(3 + static_cast<int>(seed % 12), seed, 50, 20);
    const SimulationResult none = simulate(chain, noCheckpointSchedule(chain));
    SCOPED_TRACE("seed " + std::to_string(seed));
    for (int64_t limit : {none.peak, 3 * none.peak}) {
      const Selection selection = selectSchedule(chain, limit, Strategy::Optimal);
      ASSERT_TRUE(selection.feasible);
      EXPECT_EQ(selection.schedule, noCheckpointSchedule(chain));
      EXPECT_EQ(selection.origin, "no checkpointing");
      const SolveResult dp = solveOptimal(chain, limit);
      ASSERT_TRUE(dp.feasible);
      EXPECT_DOUBLE_EQ(dp.time, none.time);
    }
    EXPECT_FALSE(selectSchedule(chain, none.peak - 1, Strategy::Optimal).schedule ==
                 noCheckpointSchedule(chain));
  }
}

// "given": any valid schedule is selected as it is, at its simulated peak and time; one that the
// chain does not allow, or that stops before the last gradient, is refused naming why; one above
// the limit is infeasible with its own peak as the smallest limit.
TEST(Strategy, GivenSchedulesRunAsTheyAreOrAreRefused) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const Costs chain = randomCosts(3 + static_cast<int>(seed % 6), seed, 50, 20);
    SCOPED_TRACE("seed " + std::to_string(seed));
    for (const Schedule& given : {noCheckpointSchedule(chain), periodicSchedule(chain, 2)}) {
      const SimulationResult sim = simulate(chain, given);
      ASSERT_TRUE(sim.valid && sim.complete);
      SelectOptions options;
      options.given = given;
      const Selection at = selectSchedule(chain, sim.peak, Strategy::Given, options);
      ASSERT_TRUE(at.feasible) << at.message;
      EXPECT_EQ(at.schedule, given);
      EXPECT_EQ(at.peak, sim.peak);
      EXPECT_DOUBLE_EQ(at.time, sim.time);
      EXPECT_EQ(selectSmallest(chain, Strategy::Given, options).peak, sim.peak);
      const Selection below = selectSchedule(chain, sim.peak - 1, Strategy::Given, options);
      EXPECT_FALSE(below.feasible);
      EXPECT_EQ(below.min_feasible_limit, sim.peak);
      EXPECT_NE(below.message.find("above the memory limit"), std::string::npos);
    }
  }
  const Costs chain = randomCosts(4, 3, 50, 20);
  SelectOptions options;
  options.given = noCheckpointSchedule(chain);
  options.given.erase(options.given.begin());  // Fall(2) before Fall(1)
  try {
    selectSchedule(chain, 1 << 30, Strategy::Given, options);
    ADD_FAILURE() << "an invalid schedule was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("op 1"), std::string::npos) << e.what();
  }
  options.given = noCheckpointSchedule(chain);
  options.given.pop_back();  // no B(1)
  EXPECT_THROW(selectSmallest(chain, Strategy::Given, options), std::invalid_argument);
  EXPECT_EQ(parseStrategy("given"), Strategy::Given);
}

// A stage that runs forward once (Costs::runs_once): the optimal strategy never recomputes it, at
// any limit down to its own smallest; periodic and revolve-style schedules, which recompute it,
// are refused naming the stage, as is a given schedule that runs it twice.
TEST(Strategy, AStageThatRunsOnceIsNeverRecomputed) {
  int constrained = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    Costs chain = randomCosts(6 + static_cast<int>(seed % 8), seed, 40, 9);
    const int once = 1 + static_cast<int>(seed % static_cast<uint64_t>(chain.length() - 1));
    chain.runs_once = {once};
    SCOPED_TRACE("seed " + std::to_string(seed) + ", stage " + std::to_string(once));
    const Selection smallest = selectSmallest(chain, Strategy::Optimal);
    ASSERT_TRUE(smallest.feasible);
    const int64_t none = simulate(chain, noCheckpointSchedule(chain)).peak;
    for (int64_t limit : {smallest.peak, (smallest.peak + none) / 2, none}) {
      const Selection optimal = selectSchedule(chain, limit, Strategy::Optimal);
      ASSERT_TRUE(optimal.feasible) << limit;
      int runs = 0;
      for (const Op& op : optimal.schedule) runs += op.stage == once && op.kind != OpKind::Backward;
      EXPECT_EQ(runs, 1) << toString(optimal.schedule);
      EXPECT_LE(optimal.peak, limit);
    }
    Costs free = chain;
    free.runs_once.clear();
    if (selectSmallest(free, Strategy::Optimal).peak < smallest.peak) ++constrained;
    for (Strategy strategy : {Strategy::Revolve, Strategy::Periodic}) {
      const Selection refused = selectSchedule(chain, none / 2, strategy);
      if (refused.feasible) continue;  // a periodic segment may end at the stage
      EXPECT_NE(refused.message.find("runs forward once"), std::string::npos) << refused.message;
    }
    EXPECT_FALSE(selectSchedule(chain, none * 2, Strategy::Revolve).feasible);
    const Selection revolve_smallest = selectSmallest(chain, Strategy::Revolve);
    EXPECT_FALSE(revolve_smallest.feasible);
    EXPECT_NE(revolve_smallest.message.find("stage " + std::to_string(once)), std::string::npos)
        << revolve_smallest.message;
  }
  EXPECT_GT(constrained, 5);
}

// SelectOptions::after_backward_bytes: what every complete schedule holds at its end, and those
// bytes beside it, bound every peak from below; the selections count it, and so does "min".
TEST(Strategy, BytesMadeAfterTheBackwardRaiseEveryPeakToTheFloor) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Costs chain = randomCosts(3 + static_cast<int>(seed % 10), seed, 50, 20);
    chain.wg.assign(chain.uf.size(), 0);
    for (size_t l = 1; l < chain.wg.size(); ++l) chain.wg[l] = static_cast<int64_t>((seed * l) % 7);
    const int64_t end = simulate(chain, noCheckpointSchedule(chain)).end_bytes;
    for (int k = 1; k <= chain.length(); ++k)
      EXPECT_EQ(simulate(chain, periodicSchedule(chain, k)).end_bytes, end);
    const MinimalPeak least = minimalPeak(chain);
    // Below the chain's own smallest peak, the floor changes nothing.
    SelectOptions low{kCoarseSlots};
    low.after_backward_bytes = 1;
    ASSERT_LT(peakFloor(chain, low.after_backward_bytes), least.limit);
    EXPECT_EQ(selectSmallest(chain, Strategy::Optimal, low).peak, least.limit);
    // Above it, the floor is the smallest limit, and the fastest schedule there is chosen.
    SelectOptions high{kCoarseSlots};
    high.after_backward_bytes = least.limit - end + 1 + static_cast<int64_t>(seed);
    const int64_t floor = peakFloor(chain, high.after_backward_bytes);
    ASSERT_EQ(floor, end + high.after_backward_bytes);
    for (Strategy strategy : {Strategy::Optimal, Strategy::Revolve, Strategy::Periodic}) {
      const Selection smallest = selectSmallest(chain, strategy, high);
      ASSERT_TRUE(smallest.feasible) << smallest.message;
      EXPECT_EQ(smallest.peak, std::max(floor, selectSmallest(chain, strategy, low).peak));
      EXPECT_LE(simulate(chain, smallest.schedule).peak, smallest.peak);
      const Selection below = selectSchedule(chain, smallest.peak - 1, strategy, high);
      EXPECT_FALSE(below.feasible);
      EXPECT_EQ(below.min_feasible_limit, smallest.peak);
      EXPECT_NE(below.message.find("made after its backward"), std::string::npos) << below.message;
    }
    const Selection at = selectSchedule(chain, floor, Strategy::Optimal, high);
    ASSERT_TRUE(at.feasible) << at.message;
    EXPECT_EQ(at.peak, floor);
    EXPECT_LE(at.time, least.time);
    SelectOptions given = high;
    given.given = least.schedule;
    EXPECT_EQ(selectSchedule(chain, floor, Strategy::Given, given).peak, floor);
    EXPECT_FALSE(selectSchedule(chain, floor - 1, Strategy::Given, given).feasible);
  }
}
