// Simulator rules and the baselines.
#include <gtest/gtest.h>

#include "solver/baselines.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"
#include "solver/testing/builtin_chains.h"

using namespace jitckpt::solver;

namespace {
Costs unitChain(int L) {
  Costs c;
  c.uf.assign(L + 1, 1);
  c.ub.assign(L + 1, 2);
  c.wa.assign(L + 1, 10);
  c.wabar.assign(L + 1, 30);
  c.wd.assign(L + 1, 10);
  c.of.assign(L + 1, 1);
  c.ob.assign(L + 1, 2);
  c.uf[0] = c.ub[0] = c.wabar[0] = c.of[0] = c.ob[0] = 0;
  return c;
}
}  // namespace

TEST(Simulator, CountsEveryTermOfTable1) {
  const Costs c = unitChain(2);
  // Start: a0 (10) + delta2 (10) = 20.
  const SimulationResult r = simulate(c, parseSchedule("Fall(1) Fall(2) B(2) B(1)"));
  ASSERT_TRUE(r.valid && r.complete) << r.reason;
  // Fall(1): 20 + 30 + 1; Fall(2): 50 + 30 + 1 = 81; B(2): 80 + delta1 (10) + 2 = 92.
  EXPECT_EQ(r.peak, 92);
  EXPECT_EQ(r.time, 1 + 1 + 2 + 2);
  EXPECT_EQ(r.recomputations, 0);
}

TEST(Simulator, ParameterGradientsStayHeldFromTheirBackwardOn) {
  Costs c = unitChain(2);
  c.wg = {0, 0, 50};
  const SimulationResult r = simulate(c, parseSchedule("Fall(1) Fall(2) B(2) B(1)"));
  ASSERT_TRUE(r.valid && r.complete) << r.reason;
  // After B(2): 80 + delta1 (10) - delta2 (10) - abar2 (30) + wg2 (50) = 100; B(1): + delta0
  // (10) + ob (2). Without wg the peak is B(2)'s 92 (CountsEveryTermOfTable1).
  EXPECT_EQ(r.peak, 112);
  c.wg = {0, 50, 0};  // B(1) is the last op: its own gradients are in ob
  EXPECT_EQ(simulate(c, parseSchedule("Fall(1) Fall(2) B(2) B(1)")).peak, 92);
}

// B(2) hands 6 of delta^2's 10 bytes on in delta^1 (a gradient passed through, or a slice of
// one): while B(2) runs, those bytes are held once.
TEST(Simulator, AGradientHandedOnIsHeldOnce) {
  Costs c = unitChain(2);
  c.wd_handed = {0, 0, 6};
  const SimulationResult r = simulate(c, parseSchedule("Fall(1) Fall(2) B(2) B(1)"));
  ASSERT_TRUE(r.valid && r.complete) << r.reason;
  // B(2): 80 + delta1 (10) - handed (6) + 2 = 86, where CountsEveryTermOfTable1 has 92.
  EXPECT_EQ(r.peak, 86);
}

// The caller keeps the chain's output a^{L-1} (here a^2, the input of terminal stage 3) to the end
// of the step. Where abar^2 holds it, it is counted apart only once B(2) has freed abar^2; where
// B(3) consumed a lone a^2, from there on, and a recomputed a^2 is a copy of its own.
TEST(Simulator, TheCallersOutputIsHeldToTheEnd) {
  Costs c = unitChain(3);
  c.ob[2] = 100;  // B(2) is the peak
  const Schedule straight = parseSchedule("Fall(1) Fall(2) Fall(3) B(3) B(2) B(1)");
  // Start 20; Fall(1..3) 51, 81, 111; B(3): 110 + delta2 + 2 = 122; B(2): 80 + 10 + 100 = 190.
  EXPECT_EQ(simulate(c, straight).peak, 190);
  c.held_output = 7;  // abar^2 holds the caller's copy through B(2): the same peak
  EXPECT_EQ(simulate(c, straight).peak, 190);
  // Fck(2) keeps a lone a^2 that B(3) consumes; from there the caller's copy is apart, and Fall(2)
  // makes a second copy beside it. Start 20; Fall(1) 51; Fck(2) 61; Fall(3) 91; B(3) 102; then
  // a0 + abar1 + delta2 = 50 (+7): Fall(2) 81 (+7); B(2): 80 + 10 + 100 = 190 (+7).
  const Schedule recomputed = parseSchedule("Fall(1) Fck(2) Fall(3) B(3) Fall(2) B(2) B(1)");
  EXPECT_EQ(simulate(c, recomputed).peak, 197);
  c.held_output = 0;
  EXPECT_EQ(simulate(c, recomputed).peak, 190);
  // After B(2) it is apart in both: B(1) as the peak, 50 + delta0 + 100 = 160 (+7).
  c.ob[2] = 2;
  c.ob[1] = 100;
  EXPECT_EQ(simulate(c, straight).peak, 160);
  c.held_output = 7;
  EXPECT_EQ(simulate(c, straight).peak, 167);
}

// A span's storage is counted once while the activations that hold it are copies of one run, and
// once per copy after a stage runs again: the real executor holds a^2 and a recomputed a^1 as
// two tensors, though the first a^1 and a^2 were one.
TEST(Simulator, SpansAreSharedByTheActivationsOfOneRun) {
  Costs c = unitChain(3);
  c.spans = {{1, 2, 6}};  // 6 of a^1's 10 bytes go on in a^2
  // Start: a0 + delta3 = 20. Fck(1): 20 + 10 + 1; Fck(2) makes only its own 4 bytes: 30 + 4 + 1.
  const SimulationResult one = simulate(c, parseSchedule("Fck(1) Fck(2)"));
  ASSERT_TRUE(one.valid) << one.reason;
  EXPECT_EQ(one.peak, 35);
  // a^1 and a^2 held alone: 14 bytes, not 20. Fall(3): 34 + 30 + 1; B(3): 64 + 10 + 2.
  EXPECT_EQ(simulate(c, parseSchedule("Fck(1) Fck(2) Fall(3) B(3)")).peak, 76);
  // F∅(2) drops a^1 (a^2 keeps the span's copy), then Fck(1) runs stage 1 again: a new copy of
  // all 10 bytes beside a^2's: 30 + 10 + 1.
  const SimulationResult again = simulate(c, parseSchedule("Fck(1) Fn(2) Fck(1)"));
  ASSERT_TRUE(again.valid) << again.reason;
  EXPECT_EQ(again.peak, 41);
  // Fall(1) over a lone a^1 makes its new copy before the old goes: 30 + 30 + 1.
  EXPECT_EQ(simulate(c, parseSchedule("Fck(1) Fall(1)")).peak, 61);
}

TEST(Simulator, ReportsTheFirstInvalidOp) {
  const Costs c = unitChain(3);
  const SimulationResult r = simulate(c, parseSchedule("Fck(1) Fn(2) Fall(3) B(3) B(2)"));
  EXPECT_FALSE(r.valid);
  EXPECT_EQ(r.first_invalid_op, 4);
  EXPECT_NE(r.reason.find("abar^2"), std::string::npos) << r.reason;
  const SimulationResult lost = simulate(c, parseSchedule("Fn(1) Fall(1)"));
  EXPECT_FALSE(lost.valid);  // F∅(1) replaced a^0
  EXPECT_EQ(lost.first_invalid_op, 1);
}

TEST(Simulator, NoneReplacesOnlyALoneInput) {
  const Costs c = unitChain(3);
  // Fall(1) holds abar^1; F∅(2) reads it and keeps it; a^2 replaced by a^3 next.
  const SimulationResult r =
      simulate(c, parseSchedule("Fall(1) Fn(2) Fn(3) Fall(3) B(3) Fall(2) B(2) B(1)"));
  EXPECT_FALSE(r.valid);  // Fall(3) needs a^2, replaced by F∅(3)
  const SimulationResult ok =
      simulate(c, parseSchedule("Fall(1) Fck(2) Fall(3) B(3) Fall(2) B(2) B(1)"));
  EXPECT_TRUE(ok.valid && ok.complete) << ok.reason;
}

TEST(Baselines, ValidAndNeverBetterThanTheDp) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const Costs chain = randomCosts(2 + static_cast<int>(seed % 9), seed, 30, 9);
    const int L = chain.length();
    std::vector<Schedule> baselines{noCheckpointSchedule(chain)};
    for (int k = 1; k <= L; ++k) baselines.push_back(periodicSchedule(chain, k));
    for (const Schedule& schedule : baselines) {
      const SimulationResult sim = simulate(chain, schedule);
      ASSERT_TRUE(sim.valid && sim.complete) << sim.reason << " in " << toString(schedule);
      PersistentSolver solver(chain, sim.peak, static_cast<int>(sim.peak));
      const SolveResult dp = solver.solve(sim.peak);
      ASSERT_TRUE(dp.feasible);
      EXPECT_LE(dp.time, sim.time);
    }
    const int64_t top = simulate(chain, baselines[0]).peak;
    const PersistentSolver revolve_solver(chain, top, static_cast<int>(top), /*revolve_only=*/true);
    const PersistentSolver optimal_solver(chain, top, static_cast<int>(top));
    for (int64_t limit = top / 3; limit <= top; limit += std::max<int64_t>(1, top / 10)) {
      const SolveResult revolve = revolve_solver.solve(limit);
      if (!revolve.feasible) continue;
      const SimulationResult sim = simulate(chain, revolve.schedule);
      ASSERT_TRUE(sim.valid && sim.complete) << sim.reason;
      EXPECT_LE(sim.peak, limit);
      // Revolve-style: every B is right after the Fall of its stage.
      for (size_t i = 0; i < revolve.schedule.size(); ++i) {
        if (revolve.schedule[i].kind == OpKind::Backward) {
          ASSERT_GT(i, 0u);
          EXPECT_EQ(revolve.schedule[i - 1], (Op{OpKind::ForwardAll, revolve.schedule[i].stage}));
        }
      }
      const SolveResult dp = optimal_solver.solve(limit);
      ASSERT_TRUE(dp.feasible);
      EXPECT_LE(dp.time, revolve.time);
    }
  }
}

TEST(Baselines, PeriodicMatchesCheckpointSequential) {
  const Costs c = unitChain(5);
  // checkpoint_sequential(5 modules, 2 segments): segment size 2, first segment [1,2] without
  // saving, last segment [3,5] with grad; backward then recomputes [1,2].
  EXPECT_EQ(toString(periodicSchedule(c, 2)),
            "Fck(1) Fn(2) Fall(3) Fall(4) Fall(5) B(5) B(4) B(3) Fall(1) Fall(2) B(2) B(1)");
  // A terminal stage joins the last segment.
  EXPECT_EQ(toString(periodicSchedule(c, 2, 4)),
            "Fck(1) Fn(2) Fall(3) Fall(4) Fall(5) B(5) B(4) B(3) Fall(1) Fall(2) B(2) B(1)");
  EXPECT_THROW(periodicSchedule(c, 6), std::invalid_argument);
}

TEST(Schedule, PrintParseRoundTripAndErrors) {
  const Schedule s = parseSchedule("Fck(1) F∅(2) Fnone(3) Fall(4) B(4) Fall(3) B(3)");
  EXPECT_EQ(toString(s), "Fck(1) Fn(2) Fn(3) Fall(4) B(4) Fall(3) B(3)");
  EXPECT_EQ(parseSchedule(toString(s)), s);
  EXPECT_THROW(parseSchedule("Fx(1)"), std::invalid_argument);
  EXPECT_THROW(parseSchedule("B(0)"), std::invalid_argument);
  EXPECT_THROW(parseSchedule("B(2"), std::invalid_argument);
  EXPECT_THROW(parseSchedule("Fall(x)"), std::invalid_argument);
}
