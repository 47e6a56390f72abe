// Full-size tables held to hashes of the tables that the solver built before its DP was last
// optimized: every cell, the curve, and the schedule, time and peak at 20 limits, for the
// benchmark's two tables (ResNet-1001 and a random chain of 340 stages at 500 slots), a chain of
// long spans and the revolve-style table. The plain recurrence (test_dp_exhaustive.cpp) checks
// chains of up to 66 stages; this checks that a faster DP changes no bit at the benchmark's size.
// A change to the cost model changes the hashes: the failure prints the new ones.
#include <gtest/gtest.h>

#include <cstdio>

#include "solver/baselines.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"
#include "solver/testing/builtin_chains.h"

using namespace jitckpt::solver;

namespace {

struct Fnv {  // FNV-1a, 64 bits
  uint64_t h = 1469598103934665603ull;
  void mix(const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const unsigned char*>(p)[i];
      h *= 1099511628211ull;
    }
  }
};

// Hash of every cell, then of the cells, the curve and 20 solves together.
std::pair<uint64_t, uint64_t> tableHashes(const Costs& chain, int slots, bool revolve_only) {
  const int64_t peak = simulate(chain, noCheckpointSchedule(chain)).peak;
  const PersistentSolver solver(chain, peak, slots, revolve_only);
  Fnv f;
  const int L = chain.length();
  for (int t = 1; t <= L; ++t) {
    for (int s = 1; s <= t; ++s) {
      for (int m = 0; m <= solver.slots(); ++m) {
        const float v = solver.cell(s, t, m);
        f.mix(&v, sizeof v);
      }
    }
  }
  const uint64_t cells = f.h;
  for (const CurvePoint& p : solver.curve()) {
    f.mix(&p.limit, sizeof p.limit);
    f.mix(&p.time, sizeof p.time);
  }
  for (int k = 1; k <= 20; ++k) {
    const SolveResult r = solver.solve(peak * k / 20);
    f.mix(&r.feasible, 1);
    f.mix(&r.time, sizeof r.time);
    f.mix(&r.peak, sizeof r.peak);
    for (const Op& op : r.schedule) {
      const int kind = static_cast<int>(op.kind), stage = op.stage;
      f.mix(&kind, sizeof kind);
      f.mix(&stage, sizeof stage);
    }
  }
  return {cells, f.h};
}

void expectHashes(const Costs& chain, int slots, bool revolve_only, uint64_t cells, uint64_t all) {
  const auto [got_cells, got_all] = tableHashes(chain, slots, revolve_only);
  char got[64];
  std::snprintf(got, sizeof got, "0x%016llxull, 0x%016llxull",
                static_cast<unsigned long long>(got_cells),
                static_cast<unsigned long long>(got_all));
  EXPECT_EQ(got_cells, cells) << "cells differ; the new hashes: " << got;
  EXPECT_EQ(got_all, all) << "curve or schedules differ; the new hashes: " << got;
}

}  // namespace

TEST(TableHash, ResNet1001At500Slots) {
  expectHashes(resnet1001Costs(), 500, false, 0xe70772b186a45211ull, 0xea14ca440e65291dull);
}

TEST(TableHash, RandomChainOf340At500Slots) {
  expectHashes(randomCosts(340, 1, 50, 20), 500, false, 0xc1e5b9ec51002515ull,
               0x3dbb55242362d21full);
}

TEST(TableHash, LongSpansAt400Slots) {
  expectHashes(withLongSpans(randomCosts(120, 5, 30, 20), 5), 400, false, 0x3cd45bc1410d2191ull,
               0x3bad177b527171fcull);
}

TEST(TableHash, RevolveStyleResNetLike) {
  expectHashes(resnetLikeCosts(94), 500, true, 0xb539e31141dcb7c5ull, 0x006fd9b74b209379ull);
}
