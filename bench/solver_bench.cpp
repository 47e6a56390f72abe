// Solver benchmark: one table (the whole time-memory curve) for the ResNet-1001 chain at S=500,
// the whole optimal strategy there, a random chain of the same length, L=100 at S=1000, and the
// growth with L (to 1000) and S. Each runs 5
// repetitions and reports mean, median and stddev (single-threaded):
//   build/bench/jitckpt-bench-solver
#include <benchmark/benchmark.h>

#include "solver/baselines.h"
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
BENCHMARK(BM_GrowthWithS)->Arg(125)->Arg(250)->Arg(500)->Arg(1000)->Arg(2000)->JITCKPT_MEDIAN_OF_5;
BENCHMARK_MAIN();
