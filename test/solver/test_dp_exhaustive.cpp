// The persistent DP against the exhaustive persistent search and the simulator.
#include <gtest/gtest.h>

#include "solver/minimal_peak.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"
#include "solver/strategy.h"
#include "solver/testing/builtin_chains.h"
#include "solver/testing/exhaustive.h"
#include "solver/testing/reference_dp.h"

using namespace jitckpt::solver;

namespace {

int64_t noCheckpointPeak(const Costs& chain) {
  Schedule none;
  for (int l = 1; l <= chain.length(); ++l) none.push_back({OpKind::ForwardAll, l});
  for (int l = chain.length(); l >= 1; --l) none.push_back({OpKind::Backward, l});
  return simulate(chain, none).peak;
}

}  // namespace

// With slot size 1 the DP is exact: its optimum equals the best persistent sequence found by
// enumerating every persistent sequence and simulating it, at every limit, infeasible included.
TEST(PersistentDp, EqualsExhaustivePersistentSearch) {
  int feasible = 0, infeasible = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const int length = 1 + static_cast<int>(seed % 5);
    const Costs chain = randomCosts(length, seed);
    const int64_t top = noCheckpointPeak(chain) + 2;
    PersistentSolver solver(chain, top, static_cast<int>(top));  // slot size 1
    ASSERT_EQ(solver.slotSize(), 1);
    for (int64_t limit = 0; limit <= top; ++limit) {
      const SearchResult best = bestPersistentSequence(chain, limit);
      const SolveResult dp = solver.solve(limit);
      ASSERT_EQ(dp.feasible, best.feasible) << "seed " << seed << " limit " << limit << "\n"
                                            << costsToJson(chain);
      if (!best.feasible) {
        ++infeasible;
        continue;
      }
      ++feasible;
      EXPECT_EQ(dp.time, best.time) << "seed " << seed << " limit " << limit << " dp "
                                    << toString(dp.schedule) << " best " << toString(best.schedule);
    }
  }
  EXPECT_GT(feasible, 100);
  EXPECT_GT(infeasible, 50);
}

// Every DP answer replays under the simulator within the limit and at the DP's time.
TEST(PersistentDp, SimulatorAgreesWithDp) {
  for (uint64_t seed = 100; seed < 140; ++seed) {
    const Costs chain = randomCosts(3 + static_cast<int>(seed % 10), seed, 50, 20);
    const int64_t top = noCheckpointPeak(chain);
    for (int slots : {7, 50, 500}) {
      PersistentSolver solver(chain, top, slots);
      for (const CurvePoint& point : solver.curve()) {
        const SolveResult dp = solver.solve(point.limit);
        ASSERT_TRUE(dp.feasible);
        const SimulationResult sim = simulate(chain, dp.schedule);
        ASSERT_TRUE(sim.valid && sim.complete) << sim.reason;
        EXPECT_LE(sim.peak, point.limit);
        EXPECT_EQ(sim.time, dp.time);
        EXPECT_EQ(static_cast<float>(sim.time), static_cast<float>(point.time));  // integer times
      }
    }
  }
}

// Rounding sizes up to slots never makes the DP exceed the limit, and a coarser table is never
// better than the exact one.
TEST(PersistentDp, DiscretizationIsConservative) {
  for (uint64_t seed = 200; seed < 230; ++seed) {
    const Costs chain = randomCosts(5, seed, 1000, 9);
    const int64_t top = noCheckpointPeak(chain);
    PersistentSolver exact(chain, top, static_cast<int>(top));
    PersistentSolver coarse(chain, top, 20);
    for (int64_t limit = top / 4; limit <= top; limit += std::max<int64_t>(1, top / 37)) {
      const SolveResult a = exact.solve(limit), b = coarse.solve(limit);
      if (b.feasible) {
        ASSERT_TRUE(a.feasible);
        EXPECT_LE(b.peak, limit);
        EXPECT_GE(b.time, a.time);
      }
    }
  }
}

TEST(PersistentDp, InfeasibleLimitSaysTheSmallestThatWorks) {
  const Costs chain = randomCosts(6, 7, 40, 9);
  const int64_t top = noCheckpointPeak(chain);
  PersistentSolver solver(chain, top, static_cast<int>(top));
  const int64_t smallest = solver.minFeasibleLimit();
  ASSERT_GT(smallest, 0);
  EXPECT_TRUE(solver.solve(smallest).feasible);
  const SolveResult below = solver.solve(smallest - 1);
  EXPECT_FALSE(below.feasible);
  EXPECT_EQ(below.min_feasible_limit, smallest);
  EXPECT_NE(below.message.find(std::to_string(smallest)), std::string::npos) << below.message;
  // solveOptimal finds it even when the asked limit is far below.
  const SolveResult tiny = solveOptimal(chain, 1, static_cast<int>(top));
  EXPECT_FALSE(tiny.feasible);
  EXPECT_GE(tiny.min_feasible_limit, smallest);
  EXPECT_TRUE(solveOptimal(chain, tiny.min_feasible_limit, 500).feasible);
}

TEST(PersistentDp, CurveIsMonotoneAndEndsAtNoRecomputation) {
  const Costs chain = resnetLikeCosts(30);
  const int64_t top = noCheckpointPeak(chain);
  // Each of the ~L terms of a peak is rounded up by at most one slot (top/500): leave room.
  PersistentSolver solver(chain, top + top / 4, 500);
  const auto curve = solver.curve();
  ASSERT_GT(curve.size(), 5u);
  for (size_t i = 1; i < curve.size(); ++i) {
    EXPECT_GT(curve[i].limit, curve[i - 1].limit);
    EXPECT_LT(curve[i].time, curve[i - 1].time);
  }
  double forward_backward = 0;
  for (int l = 1; l <= chain.length(); ++l) forward_backward += chain.uf[l] + chain.ub[l];
  EXPECT_NEAR(curve.back().time, forward_backward, 1e-3 * forward_backward);
}

// A limit read off the curve (its table's slots) must be one that solveOptimal finds a schedule
// for: its own table rounds sizes to other slots, and near the smallest limit that alone can lose
// every schedule (seen on a ConvNeXt on PyTorch 2.6). (Its schedule may be a little slower than
// the curve's point where the other rounding costs a choice: a few percent at these 50 slots.)
TEST(PersistentDp, EveryCurvePointSolves) {
  int points = 0, lost_by_own_table = 0;
  for (const int slots : {10, 50}) {
    for (uint64_t seed = 1; seed <= 200; ++seed) {
      const Costs chain = randomCosts(4 + static_cast<int>(seed % 30), seed, 5000, 20);
      for (const CurvePoint& point : optimalCurve(chain, slots)) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " limit " + std::to_string(point.limit));
        if (!PersistentSolver(chain, point.limit, slots).solve(point.limit).feasible)
          ++lost_by_own_table;
        const SolveResult solved = solveOptimal(chain, point.limit, slots);
        ASSERT_TRUE(solved.feasible) << solved.message;
        EXPECT_LE(solved.peak, point.limit);
        ++points;
      }
    }
  }
  EXPECT_GT(points, 2000);
  EXPECT_GT(lost_by_own_table, 0) << "the chains no longer show the case this test is about";
}

// Zero-size activations make sub-problems refer to the same memory column: the table must be
// filled by interval length for this to be right.
TEST(PersistentDp, ZeroSizeActivations) {
  Costs chain = randomCosts(5, 3);
  for (int l = 0; l <= 5; ++l) chain = withEmptyActivation(chain, l);
  for (int l = 1; l <= 5; ++l) chain.wabar[l] = l % 2 ? 0 : 3;
  for (int64_t limit = 0; limit < 30; ++limit) {
    const SearchResult best = bestPersistentSequence(chain, limit);
    PersistentSolver solver(chain, 40, 40);
    const SolveResult dp = solver.solve(limit);
    ASSERT_EQ(dp.feasible, best.feasible) << limit;
    if (best.feasible) {
      EXPECT_EQ(dp.time, best.time) << limit;
    }
  }
}

// Stages that pass most of their input through (Inception's branch stages, DenseNet's feature
// list): abar^l costs far less than a^l beside a^{l-1}, and checkpoints of consecutive stages
// share what they pass on. The DP's lower bounds must count that, or they rule out the schedules
// that keep such stages' abar; its checkpoints must be charged what their sub-chain's input does
// not hold, which the simulator (following each run's copies) confirms.
TEST(PersistentDp, PassThroughChainsEqualExhaustiveSearch) {
  int cheaper_than_a = 0, shared_beyond_next = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    Costs chain = withLongSpans(randomCosts(3 + static_cast<int>(seed % 4), seed, 12, 9), seed);
    for (int l = 1; l <= chain.length(); ++l) {
      chain.wabar[l] = chain.wa[l] + static_cast<int64_t>((seed + l) % 3);
      if (chain.abarOwnBytes(l) < chain.wa[l]) ++cheaper_than_a;
      if (l >= 2 && chain.sharedBytes(l - 2, l) > 0) ++shared_beyond_next;
    }
    const int64_t top = noCheckpointPeak(chain) + 2;
    PersistentSolver solver(chain, top, static_cast<int>(top));
    for (int64_t limit = 0; limit <= top; ++limit) {
      const SearchResult best = bestPersistentSequence(chain, limit);
      const SolveResult dp = solver.solve(limit);
      ASSERT_EQ(dp.feasible, best.feasible) << "seed " << seed << " limit " << limit << "\n"
                                            << costsToJson(chain);
      if (best.feasible) {
        EXPECT_EQ(dp.time, best.time) << "seed " << seed << " limit " << limit;
      }
    }
  }
  EXPECT_GT(cheaper_than_a, 100);
  EXPECT_GT(shared_beyond_next, 100);
}

// The fast table (pruned relaxations, compressed rows, vectors, cache blocking) against the plain
// recurrence, at sizes the exhaustive searches cannot reach: every cell C[s,t,m] and the curve, bit
// for bit. Random chains (gradients and pass-throughs drawn; integer times, and the same chains
// with fractional times, whose sums round, so that the order of the sums matters; some with every
// third activation of size 0), ResNet-like chains, the revolve-style table, and slot counts from
// rows narrower than one 16-float block to rows of 500 slots.
TEST(PersistentDp, EqualsThePlainRecurrence) {
  int64_t cells = 0;
  int points = 0;
  auto check = [&](const Costs& chain, int64_t top, int slots, bool revolve_only,
                   const std::string& what) {
    SCOPED_TRACE(what + ", " + std::to_string(slots) + " slots" +
                 (revolve_only ? ", revolve" : ""));
    const PersistentSolver fast(chain, top, slots, revolve_only);
    const ReferenceTable plain(chain, top, slots, revolve_only);
    ASSERT_EQ(fast.slots(), plain.slots());
    const int L = chain.length();
    for (int s = 1; s <= L; ++s) {
      for (int t = s; t <= L; ++t) {
        for (int m = 0; m <= fast.slots(); ++m) {
          const float a = fast.cell(s, t, m), b = plain.value(s, t, m);
          // Infeasible cells: +inf in both (the plain table keeps its initial value).
          if (a >= 1e29f && b >= 1e29f) continue;
          ASSERT_EQ(a, b) << "cell (" << s << ", " << t << ", " << m << ")";
          ++cells;
        }
      }
    }
    const auto fast_curve = fast.curve(), plain_curve = plain.curve();
    ASSERT_EQ(fast_curve.size(), plain_curve.size());
    for (size_t i = 0; i < fast_curve.size(); ++i) {
      EXPECT_EQ(fast_curve[i].limit, plain_curve[i].limit) << i;
      EXPECT_EQ(fast_curve[i].time, plain_curve[i].time) << i;
    }
    points += static_cast<int>(fast_curve.size());
  };
  auto fractional = [](Costs chain) {
    for (auto* times : {&chain.uf, &chain.uf_nograd, &chain.ub})
      for (double& v : *times) v = v / 7.0 + 0.013;
    chain.uf[0] = chain.uf_nograd[0] = chain.ub[0] = 0;
    return chain;
  };
  auto zeroEveryThird = [](Costs chain) {
    for (int l = 3; l <= chain.length(); l += 3) chain = withEmptyActivation(chain, l);
    return chain;
  };
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    const int length = 8 + static_cast<int>(seed * 7 % 30);
    Costs chain = randomCosts(length, seed, 2000, 50);
    if (seed % 3 == 0) chain = zeroEveryThird(chain);
    if (seed % 3 == 1) chain = withLongSpans(chain, seed);
    const std::string name = "random seed " + std::to_string(seed);
    const int64_t top = noCheckpointPeak(chain);
    for (const int slots : {37, 200}) {
      check(chain, top, slots, false, name);
      check(fractional(chain), top / 2, slots, false, name + ", fractional, half");
    }
    if (seed % 4 == 0) {
      check(chain, top, 200, true, name);
      check(fractional(chain), top, 3, false, name + ", fractional");
      check(chain, top, 9, true, name);
    }
  }
  for (const int blocks : {20, 40}) {
    const Costs chain = resnetLikeCosts(blocks);
    const std::string name = "resnet-like " + std::to_string(blocks);
    const int64_t top = noCheckpointPeak(chain);
    check(chain, top + top / 4, 500, false, name);
    check(chain, top / 3, 500, false, name + ", a third");
    check(chain, top, 200, true, name);
  }
  EXPECT_GT(points, 1000);
  EXPECT_GT(cells, 1000000);
}

// Stages that run forward once (Costs::runs_once, a random state no saved generator restores): the
// DP, the smallest peak and the exhaustive search, whose sequences the simulator checks, agree;
// and the constraint costs time somewhere, or the test would not see it.
TEST(PersistentDp, StagesThatRunOnceEqualExhaustiveSearch) {
  int slower = 0, checked = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    Costs chain = randomCosts(2 + static_cast<int>(seed % 5), seed);
    for (int l = 1; l < chain.length(); ++l) {
      if ((seed * 7 + static_cast<uint64_t>(l) * 3) % 3 == 0) chain.runs_once.push_back(l);
    }
    if (chain.runs_once.empty())
      chain.runs_once.push_back(1 + static_cast<int>(seed % 2) % (chain.length() - 1));
    Costs free = chain;
    free.runs_once.clear();
    SCOPED_TRACE("seed " + std::to_string(seed) + "\n" + costsToJson(chain));
    const int64_t top = noCheckpointPeak(chain) + 2;
    const PersistentSolver solver(chain, top, static_cast<int>(top));
    const PersistentSolver unconstrained(free, top, static_cast<int>(top));
    for (int64_t limit = 0; limit <= top; ++limit) {
      const SearchResult best = bestPersistentSequence(chain, limit);
      const SolveResult dp = solver.solve(limit);  // throws where the simulator rejects it
      ASSERT_EQ(dp.feasible, best.feasible) << "limit " << limit;
      if (!best.feasible) continue;
      ++checked;
      EXPECT_EQ(dp.time, best.time) << "limit " << limit << " dp " << toString(dp.schedule);
      const SolveResult other = unconstrained.solve(limit);
      if (!other.feasible || other.time < dp.time) ++slower;
    }
    const MinimalPeak least = minimalPeak(chain);
    int64_t smallest = 0;
    while (!bestPersistentSequence(chain, smallest).feasible) ++smallest;
    EXPECT_EQ(least.limit, smallest);
    EXPECT_EQ(minimalPeak(chain, /*revolve_only=*/true).limit, -1);
    EXPECT_FALSE(solveRevolve(chain, top, 50).feasible);
  }
  EXPECT_GT(checked, 500);
  EXPECT_GT(slower, 50);
}

// A given schedule that runs such a stage twice is refused, naming it.
TEST(PersistentDp, ScheduleRunningAStageOnceAgainIsInvalid) {
  Costs chain = randomCosts(3, 5);
  chain.runs_once = {2};
  const Schedule twice = parseSchedule("Fck(1) F∅(2) Fall(3) B(3) Fall(1) Fall(2) B(2) B(1)");
  const SimulationResult sim = simulate(chain, twice);
  EXPECT_FALSE(sim.valid);
  EXPECT_NE(sim.reason.find("stage 2 runs forward once"), std::string::npos) << sim.reason;
  chain.runs_once.clear();
  EXPECT_TRUE(simulate(chain, twice).valid);
}
