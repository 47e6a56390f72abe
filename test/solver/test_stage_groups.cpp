// groupStages and expandGroups: the groups a schedule allows, and the schedule over them, which
// must stand for exactly the schedule it came from.
#include <gtest/gtest.h>

#include "solver/baselines.h"
#include "solver/simulator.h"
#include "solver/stage_groups.h"
#include "solver/strategy.h"
#include "solver/testing/builtin_chains.h"

using namespace jitckpt::solver;

namespace {

// Stages 1..L and the terminal stage L + 1.
StageGroups groupsOf(const std::string& text, int L, const std::vector<bool>& may_join = {}) {
  return groupStages(parseSchedule(text), L, may_join);
}

}  // namespace

TEST(StageGroups, NoCheckpointingIsOneGroup) {
  const StageGroups groups = groupsOf("Fall(1) Fall(2) Fall(3) Fall(4) B(4) B(3) B(2) B(1)", 3);
  EXPECT_EQ(groups.first, std::vector<int>({1}));
  EXPECT_EQ(toString(groups.schedule), "Fall(1) Fall(2) B(2) B(1)");
}

TEST(StageGroups, KeepsTheBoundariesACheckpointNeeds) {
  // a^2 is stored alone by Fck(3)'s run and read again: stages 1..2 and 3..4 are groups; 5 stays
  // apart from 4, whose Fall run it does not continue.
  const std::string text =
      "Fck(1) Fn(2) Fck(3) Fn(4) Fall(5) Fall(6) B(6) B(5) Fall(3) Fall(4) B(4) B(3) Fall(1) "
      "Fall(2) B(2) B(1)";
  const StageGroups groups = groupsOf(text, 5);
  EXPECT_EQ(groups.first, std::vector<int>({1, 3, 5}));
  EXPECT_EQ(toString(groups.schedule),
            "Fck(1) Fck(2) Fall(3) Fall(4) B(4) B(3) Fall(2) B(2) Fall(1) B(1)");
  EXPECT_EQ(toString(expandGroups(groups, 5)), text);
}

TEST(StageGroups, AStageThatMayNotJoinStaysApart) {
  const StageGroups groups =
      groupsOf("Fall(1) Fall(2) Fall(3) Fall(4) B(4) B(3) B(2) B(1)", 3, {true, true, false});
  EXPECT_EQ(groups.first, std::vector<int>({1, 3}));
  EXPECT_EQ(toString(groups.schedule), "Fall(1) Fall(2) Fall(3) B(3) B(2) B(1)");
}

// On random chains, every schedule the strategies give at every limit: the grouped schedule
// expands back to it, is valid on the grouped chain, and no group boundary could go.
TEST(StageGroups, StandForTheSchedulesTheyCameFrom) {
  int grouped = 0, schedules = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Costs chain = randomCosts(3 + static_cast<int>(seed % 9), seed, 50, 20);
    const int L = chain.length() - 1;  // the last stage plays the terminal one
    const int64_t none_peak = simulate(chain, noCheckpointSchedule(chain)).peak;
    std::vector<Schedule> all{noCheckpointSchedule(chain)};
    for (int k = 1; k <= chain.length(); ++k) all.push_back(periodicSchedule(chain, k));
    for (int64_t limit = none_peak / 4; limit <= none_peak; limit += none_peak / 12 + 1) {
      const SolveResult dp = solveOptimal(chain, limit, 40);
      if (dp.feasible) all.push_back(dp.schedule);
    }
    for (const Schedule& schedule : all) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ": " + toString(schedule));
      const StageGroups groups = groupStages(schedule, L);
      ASSERT_EQ(expandGroups(groups, L), schedule);
      ASSERT_EQ(groups.first.front(), 1);
      ++schedules;
      if (groups.size() < L) ++grouped;
      // Each boundary kept is needed: without it the schedule no longer expands back.
      for (size_t g = 1; g < groups.first.size(); ++g) {
        StageGroups merged;
        merged.first = groups.first;
        merged.first.erase(merged.first.begin() + static_cast<std::ptrdiff_t>(g));
        for (const Op& op : groups.schedule) {
          const int stage = op.stage > static_cast<int>(g) ? op.stage - 1 : op.stage;
          if (op.stage == static_cast<int>(g) + 1 && !merged.schedule.empty() &&
              merged.schedule.back().stage == stage &&
              (op.kind == OpKind::Backward) == (merged.schedule.back().kind == OpKind::Backward))
            continue;  // the second half of a run that would now be one op
          merged.schedule.push_back({op.kind, stage});
        }
        EXPECT_NE(expandGroups(merged, L), schedule) << "boundary before stage " << groups.first[g];
      }
    }
  }
  EXPECT_GT(grouped, schedules / 2);  // most schedules leave something to group
}

TEST(StageGroups, RefusesWhatIsNoChain) {
  EXPECT_THROW(groupStages(parseSchedule("Fall(1) B(1)"), 0), std::invalid_argument);
  EXPECT_THROW(groupStages(parseSchedule("Fall(1) Fall(2) B(2) B(1)"), 1, {true, true}),
               std::invalid_argument);
}
