// Helpers for the runtime tests: load a fixture model, rewrite a copy of it under a given kind of
// schedule, run training steps on both and collect everything that must be bit-identical.
//
// The reference is the unmodified scripted module run by the graph executor with optimization
// off (torch::jit::setGraphExecutorOptimize(false), Python's torch.jit.optimized_execution(False)):
// plain interpreter and eager autograd, which is what each stage of the chain runs. The optimizing
// executor builds DifferentiableGraphs after its profiling run, whose symbolic gradients differ
// from eager autograd in the last bits (linear + tanh: 1.5e-8 on 1.13); it is not a bitwise
// reference for any runtime that runs eager autograd, checkpointed or not. See
// ReferenceExecutorGuard.
#pragma once

#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "passes/partition/module.h"
#include "passes/rewrite.h"
#include "runtime/plan.h"
#include "solver/baselines.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"
#include "test/fixtures/fixture_path.h"

namespace jitckpt::test {

inline torch::jit::Module loadFixture(const std::string& name) {
  const std::string path = fixture(name);
  TORCH_CHECK(!path.empty(), "fixture model '", name, "' was not made by this build");
  return torch::jit::load(path);
}

// Input shape each fixture is tested with.
inline std::vector<int64_t> inputShape(const std::string& name) {
  if (name == "dropout_mlp" || name == "shared_parameter") return {4, 16};
  if (name == "resnet18") return {2, 3, 32, 32};
  if (name == "tiny_resnet") return {2, 3, 12, 12};
  return {2, 3, 8, 8};
}

// Turns graph executor optimization off for its lifetime (see the header comment).
class ReferenceExecutorGuard {
 public:
  explicit ReferenceExecutorGuard(bool optimize = false)
      : previous_(torch::jit::getGraphExecutorOptimize()) {
    torch::jit::setGraphExecutorOptimize(optimize);
  }
  ~ReferenceExecutorGuard() { torch::jit::setGraphExecutorOptimize(previous_); }

 private:
  bool previous_;
};

// Heterogeneous synthetic costs for the L model stages plus the zero-cost terminal stage. The
// executor's exactness does not depend on the costs; they only shape the schedules under test.
inline solver::Costs syntheticCosts(int L) {
  solver::Costs c;
  const int n = L + 2;  // entries 0..L+1
  c.uf.assign(n, 0);
  c.ub.assign(n, 0);
  c.wa.assign(n, 0);
  c.wabar.assign(n, 0);
  c.wd.assign(n, 0);
  c.of.assign(n, 0);
  c.ob.assign(n, 0);
  c.wa[0] = c.wd[0] = 100;
  for (int l = 1; l <= L; ++l) {
    c.uf[l] = 1 + l % 3;
    c.ub[l] = 2 * c.uf[l];
    c.wa[l] = c.wd[l] = 100 + 37 * (l % 4);
    c.wabar[l] = 3 * c.wa[l] + 50 * (l % 3);
    c.of[l] = 10;
    c.ob[l] = 20;
  }
  return c;
}

// The kinds of schedule every exactness test runs.
enum class ScheduleKind {
  None,
  Periodic2,
  Periodic3,
  Revolve,
  OptimalMin,
  OptimalMid,
  OptimalHigh
};

inline std::string toString(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::None:
      return "none";
    case ScheduleKind::Periodic2:
      return "periodic2";
    case ScheduleKind::Periodic3:
      return "periodic3";
    case ScheduleKind::Revolve:
      return "revolve";
    case ScheduleKind::OptimalMin:
      return "optimal_min";
    case ScheduleKind::OptimalMid:
      return "optimal_mid";
    case ScheduleKind::OptimalHigh:
      return "optimal_high";
  }
  return "?";
}

inline solver::Schedule makeSchedule(const solver::Costs& costs, ScheduleKind kind) {
  const int L = costs.length() - 1;  // model stages
  const int64_t unconstrained = solver::simulate(costs, solver::noCheckpointSchedule(costs)).peak;
  switch (kind) {
    case ScheduleKind::None:
      return solver::noCheckpointSchedule(costs);
    case ScheduleKind::Periodic2:
      return solver::periodicSchedule(costs, std::min(2, L), L);
    case ScheduleKind::Periodic3:
      return solver::periodicSchedule(costs, std::min(3, L), L);
    case ScheduleKind::Revolve: {  // at the smallest limit it fits in: the most recomputation
      const int64_t max = 2 * unconstrained;
      solver::PersistentSolver table(costs, max, static_cast<int>(max), /*revolve_only=*/true);
      solver::SolveResult r = table.solve(table.minFeasibleLimit());
      EXPECT_TRUE(r.feasible) << r.message;
      return r.schedule;
    }
    default: {
      // Slot size 1 (slots = limit): the DP is exact, and the chains are small.
      solver::PersistentSolver table(costs, unconstrained, static_cast<int>(unconstrained));
      const int64_t min = table.minFeasibleLimit();
      const int64_t limit = kind == ScheduleKind::OptimalMin ? min
                            : kind == ScheduleKind::OptimalMid
                                ? (min + unconstrained) / 2
                                : min + (unconstrained - min) * 9 / 10;
      solver::SolveResult r = table.solve(limit);
      EXPECT_TRUE(r.feasible) << r.message;
      return r.schedule;
    }
  }
}

struct Rewritten {
  torch::jit::Module module;
  c10::intrusive_ptr<Plan> plan;
};

inline solver::Strategy strategyOf(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::None:
      return solver::Strategy::None;
    case ScheduleKind::Periodic2:
    case ScheduleKind::Periodic3:
      return solver::Strategy::Periodic;
    case ScheduleKind::Revolve:
      return solver::Strategy::Revolve;
    default:
      return solver::Strategy::Optimal;
  }
}

// A solution of synthetic costs for L stages that runs `schedule_for(costs)`.
inline Solution syntheticSolution(
    int L, const std::function<solver::Schedule(const solver::Costs&)>& schedule_for,
    solver::Strategy strategy = solver::Strategy::Optimal) {
  Solution s;
  s.costs = syntheticCosts(L);
  s.schedule = schedule_for(s.costs);
  const solver::SimulationResult sim = solver::simulate(s.costs, s.schedule);
  s.predicted_peak = sim.peak;
  s.predicted_time = sim.time;
  s.unconstrained_peak = solver::simulate(s.costs, solver::noCheckpointSchedule(s.costs)).peak;
  s.memory_limit = sim.peak;
  s.strategy = strategy;
  return s;
}

// Partitions a clone of `module` (deep copies of its tensors: the reference trains its own) and
// rewrites it to run `schedule_for(costs)` with synthetic costs.
inline Rewritten rewriteWith(
    const torch::jit::Module& module,
    const std::function<solver::Schedule(const solver::Costs&)>& schedule_for,
    const PartitionOptions& options = {}, solver::Strategy strategy = solver::Strategy::Optimal) {
  PartitionedClone pc = partitionClone(module, options, /*share_tensors=*/false);
  auto stages = chainStagesOf(pc.partition);
  auto plan =
      c10::make_intrusive<Plan>(stages, syntheticSolution(stages->size(), schedule_for, strategy));
  rewriteChain(pc.module, pc.partition, plan);
  return {std::move(pc.module), plan};
}

inline Rewritten rewriteWith(const torch::jit::Module& module, ScheduleKind kind,
                             const PartitionOptions& options = {}) {
  return rewriteWith(
      module, [kind](const solver::Costs& c) { return makeSchedule(c, kind); }, options,
      strategyOf(kind));
}

// Everything a training step produces that must be bit-identical: the output, the input gradient,
// every parameter gradient, and (after the step) every buffer and parameter.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

inline NamedTensors trainingStep(torch::jit::Module& module, const at::Tensor& input, uint64_t seed,
                                 double learning_rate = 0.05) {
  NamedTensors result;
  for (auto p : module.parameters()) p.mutable_grad() = at::Tensor();
  torch::manual_seed(seed);
  at::Tensor x = input.clone().requires_grad_(true);
  at::Tensor out = module.forward({x}).toTensor();
  (out * out).sum().backward();
  result.emplace_back("output", out.detach().clone());
  result.emplace_back("input.grad", x.grad().defined() ? x.grad().clone() : at::Tensor());
  // The generator after the step: recomputation must leave it where the reference leaves it.
  result.emplace_back("next random", torch::rand({4}));
  for (const auto& p : module.named_parameters()) {
    result.emplace_back(p.name + ".grad",
                        p.value.grad().defined() ? p.value.grad().clone() : at::Tensor());
  }
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : module.named_parameters()) {
      if (p.value.grad().defined()) p.value.sub_(p.value.grad() * learning_rate);
    }
  }
  for (const auto& b : module.named_buffers()) result.emplace_back(b.name, b.value.clone());
  return result;
}

// Bit-identical (torch::equal, same dtype and shape), entry by entry, with the name in the message.
inline void expectIdentical(const NamedTensors& expected, const NamedTensors& actual,
                            const std::string& context) {
  ASSERT_EQ(expected.size(), actual.size()) << context;
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(context + ": " + expected[i].first);
    ASSERT_EQ(expected[i].first, actual[i].first);
    ASSERT_EQ(expected[i].second.defined(), actual[i].second.defined());
    if (!expected[i].second.defined()) continue;
    ASSERT_EQ(expected[i].second.sizes(), actual[i].second.sizes());
    ASSERT_EQ(expected[i].second.scalar_type(), actual[i].second.scalar_type());
    EXPECT_TRUE(torch::equal(expected[i].second, actual[i].second))
        << "max difference "
        << (expected[i].second.to(at::kDouble) - actual[i].second.to(at::kDouble))
               .abs()
               .max()
               .item<double>();
  }
}

// Trains the reference and the rewritten module side by side for `steps` steps.
inline void expectSameTraining(torch::jit::Module& reference, torch::jit::Module& rewritten,
                               const at::Tensor& input, int steps, const std::string& context) {
  for (int step = 0; step < steps; ++step) {
    const NamedTensors expected = trainingStep(reference, input, 1000 + step);
    const NamedTensors actual = trainingStep(rewritten, input, 1000 + step);
    expectIdentical(expected, actual, context + " step " + std::to_string(step));
    if (::testing::Test::HasFailure()) return;
  }
}

inline bool hasRecomputation(const Plan& plan) {
  return solver::simulate(plan.solution().costs, plan.solution().schedule).recomputations > 0;
}

}  // namespace jitckpt::test
