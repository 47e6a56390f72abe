// Solver benchmark: one table (the whole time-memory curve) for the ResNet-1001 chain at S=500,
// the whole optimal strategy there, a random chain of the same length, L=100 at S=1000, the
// growth with L (to 1000) and S, and the DP's inner loop alone on rows that stay in the core's
// first cache (the floor a table's splits and blocks can reach). Each runs 5 repetitions and
// reports mean, median and stddev (single-threaded):
//   build/bench/jitckpt-bench-solver
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "solver/baselines.h"
#include "solver/dp_kernels.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"
#include "solver/strategy.h"
#include "solver/testing/builtin_chains.h"

using namespace jitckpt::solver;

namespace {

void solveWholeCurve(benchmark::State& state, const Costs& chain, int slots) {
  const int64_t peak = simulate(chain, noCheckpointSchedule(chain)).peak;
  for (auto _ : state) {
    PersistentSolver solver(chain, peak, slots);
    auto curve = solver.curve();
    auto half = solver.solve(peak / 2);
    benchmark::DoNotOptimize(curve.data());
    benchmark::DoNotOptimize(half.time);
  }
  state.counters["L"] = chain.length();
  state.counters["S"] = slots;
  const PersistentSolver solver(chain, peak, slots);
  state.counters["curve_points"] = static_cast<double>(solver.curve().size());
  state.counters["table_MB"] = static_cast<double>(solver.tableBytes()) / 1e6;
}

// Everything the optimal strategy builds for one limit (half the unconstrained peak): the
// persistent table, the periodic schedules and no checkpointing, each simulated.
void BM_OptimalStrategy_ResNet1001(benchmark::State& state) {
  const Costs chain = resnet1001Costs();
  const int64_t peak = simulate(chain, noCheckpointSchedule(chain)).peak;
  for (auto _ : state) {
    Selection selection = selectSchedule(chain, peak / 2, Strategy::Optimal);
    benchmark::DoNotOptimize(selection.time);
  }
  state.counters["L"] = chain.length();
}

void BM_ResNet1001_S500(benchmark::State& state) { solveWholeCurve(state, resnet1001Costs(), 500); }
void BM_L100_S1000(benchmark::State& state) { solveWholeCurve(state, resnetLikeCosts(94), 1000); }
// A heterogeneous chain of ResNet-1001's length: random sizes up to 50, times up to 20.
void BM_Random340_S500(benchmark::State& state) {
  solveWholeCurve(state, randomCosts(340, 1, 50, 20), 500);
}
void BM_GrowthWithL(benchmark::State& state) {
  solveWholeCurve(state, resnetLikeCosts(static_cast<int>(state.range(0)) - 6), 500);
}
void BM_GrowthWithS(benchmark::State& state) {
  solveWholeCurve(state, resnetLikeCosts(94), static_cast<int>(state.range(0)));
}

// relaxSplits on one row of 500 slots: 4096 splits, each starting at a random slot and running
// a random 1..2n-1 blocks (mean n, the argument) before the row is at its bound; no candidate
// lowers a cell, so every repetition does the same work. Reports the time per split and per
// block: a table's splits and blocks (counted with an instrumented copy) times these give what
// it would take if its rows never left the first cache.
void BM_RelaxSplitsInCache(benchmark::State& state) {
  using namespace jitckpt::solver::detail;
  constexpr int kSlots = 500, kSplits = 4096;
  const int mean_blocks = static_cast<int>(state.range(0));
  std::vector<float> out(kSlots + 1 + kBlock, -kInf), rows(2 * (kSlots + kRowPadding), 1e7f);
  for (int m = 0; m <= kSlots; ++m) out[static_cast<size_t>(m)] = 1e6f - 10.0f * m;
  std::vector<SplitBase> bases(kSplits);
  std::vector<StoredRow> right(kSplits);
  const std::vector<int> gradients(kSplits, 0);
  std::mt19937 rng(1);
  int64_t blocks = 0;
  for (int i = 0; i < kSplits; ++i) {
    const int n = std::uniform_int_distribution<int>(1, 2 * mean_blocks - 1)(rng);
    const int lo = std::uniform_int_distribution<int>(0, kSlots - kBlock * n)(rng);
    // the run starts at lo (the checkpoint's shift) and stops at the block starting at
    // lo + 16 n, the first where out is at or below the bound
    bases[i] = {
        rows.data() + kSlots + kRowPadding, 0, kSlots, out[lo + kBlock * n] + 5.0f, lo, 0, 0.0f};
    right[i] = {rows.data(), 0, kSlots, 0.0f};
    blocks += n;
  }
  for (auto _ : state) {
    relaxSplits(out.data(), bases.data(), right.data(), gradients.data(), kSplits, 0, kSlots);
    benchmark::ClobberMemory();
  }
  const auto per = benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert;
  state.counters["per_split"] = benchmark::Counter(kSplits, per);
  state.counters["per_block"] = benchmark::Counter(static_cast<double>(blocks), per);
}

}  // namespace

#define JITCKPT_MEDIAN_OF_5 \
  Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true)
BENCHMARK(BM_ResNet1001_S500)->JITCKPT_MEDIAN_OF_5;
BENCHMARK(BM_OptimalStrategy_ResNet1001)->JITCKPT_MEDIAN_OF_5;
BENCHMARK(BM_Random340_S500)->JITCKPT_MEDIAN_OF_5;
BENCHMARK(BM_L100_S1000)->JITCKPT_MEDIAN_OF_5;
BENCHMARK(BM_GrowthWithL)
    ->Arg(50)
    ->Arg(100)
    ->Arg(200)
    ->Arg(300)
    ->Arg(400)
    ->Arg(700)
    ->Arg(1000)
    ->JITCKPT_MEDIAN_OF_5;
BENCHMARK(BM_RelaxSplitsInCache)->Arg(1)->Arg(4)->Arg(7)->Arg(13)->JITCKPT_MEDIAN_OF_5;
BENCHMARK(BM_GrowthWithS)->Arg(125)->Arg(250)->Arg(500)->Arg(1000)->Arg(2000)->JITCKPT_MEDIAN_OF_5;
BENCHMARK_MAIN();
