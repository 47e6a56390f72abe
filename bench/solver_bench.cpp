// Solver benchmark: one table (the whole time-memory curve) for the ResNet-1001 chain at S=500,
// L=100 at S=1000, and the growth with L and S. Report medians:
//   build/bench/jitckpt-bench-solver --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "passes/solver/baselines.h"
#include "passes/solver/builtin_chains.h"
#include "passes/solver/persistent_dp.h"
#include "passes/solver/simulator.h"

using namespace jitckpt::solver;

namespace {

void solveWholeCurve(benchmark::State& state, const Chain& chain, int slots) {
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
  state.counters["table_MiB"] = static_cast<double>(chain.length()) * (chain.length() + 1) / 2 * (slots + 1) * 4 / 1048576.0;
}

void BM_ResNet1001_S500(benchmark::State& state) { solveWholeCurve(state, resnet1001Chain(), 500); }
void BM_L100_S1000(benchmark::State& state) { solveWholeCurve(state, resnetLikeChain(94), 1000); }
void BM_GrowthWithL(benchmark::State& state) {
  solveWholeCurve(state, resnetLikeChain(static_cast<int>(state.range(0)) - 6), 500);
}
void BM_GrowthWithS(benchmark::State& state) {
  solveWholeCurve(state, resnetLikeChain(94), static_cast<int>(state.range(0)));
}

}  // namespace

BENCHMARK(BM_ResNet1001_S500)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_L100_S1000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GrowthWithL)->Arg(50)->Arg(100)->Arg(200)->Arg(400)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GrowthWithS)->Arg(125)->Arg(250)->Arg(500)->Arg(1000)->Arg(2000)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
