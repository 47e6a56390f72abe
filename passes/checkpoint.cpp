// The whole pipeline on a scripted module: partition -> profile -> solve -> rewrite.
#include "passes/checkpoint.h"

#include <torch/csrc/jit/passes/inliner.h>

#include <iostream>

#include "passes/partition.h"
#include "passes/profile.h"
#include "passes/rewrite.h"
#include "passes/solver/baselines.h"
#include "passes/solver/best_schedule.h"
#include "passes/solver/memory_size.h"
#include "passes/solver/persistent_dp.h"
#include "passes/solver/simulator.h"

namespace jitckpt {

MemoryLimit MemoryLimit::parse(const std::string& text) {
  try {
    const solver::MemorySpec spec = solver::parseMemorySpec(text);
    switch (spec.kind) {
      case solver::MemorySpec::Kind::Bytes:
        return bytes(static_cast<int64_t>(spec.value));
      case solver::MemorySpec::Kind::Fraction:
        return fraction(spec.value);
      case solver::MemorySpec::Kind::Unlimited:
        return unlimited();
    }
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, e.what());
  }
  return unlimited();
}

Strategy parseStrategy(const std::string& name) {
  if (name == "optimal") return Strategy::Optimal;
  if (name == "periodic") return Strategy::Periodic;
  if (name == "revolve") return Strategy::Revolve;
  if (name == "none") return Strategy::None;
  TORCH_CHECK(false, "unknown strategy '", name, "': use optimal, periodic, revolve or none");
}

std::string toString(Strategy strategy) {
  switch (strategy) {
    case Strategy::Optimal:
      return "optimal";
    case Strategy::Periodic:
      return "periodic";
    case Strategy::Revolve:
      return "revolve";
    case Strategy::None:
      return "none";
  }
  return "?";
}

void solvePlan(Plan& plan, const MemoryLimit& limit, Strategy strategy, int segments) {
  using namespace solver;
  const Chain& costs = plan.costs;
  const int L = plan.numStages();
  const int64_t unconstrained = simulate(costs, noCheckpointSchedule(costs)).peak;
  plan.unconstrained_peak = unconstrained;
  int64_t bytes = unconstrained;
  if (limit.kind == MemoryLimit::Kind::Bytes) bytes = static_cast<int64_t>(limit.value);
  if (limit.kind == MemoryLimit::Kind::Fraction)
    bytes = static_cast<int64_t>(limit.value * static_cast<double>(unconstrained));
  plan.memory_limit = bytes;
  plan.strategy = toString(strategy);
  const std::string tried = "a memory limit of " + formatBytes(bytes) +
                            " for activations (the unconstrained peak is " +
                            formatBytes(unconstrained) + ")";

  Schedule schedule;
  switch (strategy) {
    case Strategy::Optimal: {
      // The schedule: the fastest that fits with exact sizes, among the DP's at this limit's own
      // resolution and the baselines' (best_schedule.h). The curve: one wider table.
      const BestSchedule best = solveBest(costs, bytes, plan.slots, L);
      TORCH_CHECK(best.result.feasible, "no checkpointing schedule fits in ", tried,
                  "; the smallest limit that works is ",
                  formatBytes(best.result.min_feasible_limit), " (", best.result.min_feasible_limit,
                  " bytes). Raise the limit, or use a smaller batch or input");
      schedule = best.result.schedule;
      plan.curve = PersistentSolver(costs, std::max<int64_t>(unconstrained + unconstrained / 4, 1),
                                    plan.slots)
                       .curve();
      break;
    }
    case Strategy::Revolve: {
      SolveResult result = solveRevolve(costs, bytes, plan.slots);
      TORCH_CHECK(result.feasible, "no revolve-style schedule fits in ", tried,
                  "; the smallest limit that works is ", formatBytes(result.min_feasible_limit));
      schedule = result.schedule;
      break;
    }
    case Strategy::Periodic: {
      double best = -1;
      int64_t smallest = -1;
      for (int k = segments > 0 ? segments : 1; k <= (segments > 0 ? segments : L); ++k) {
        TORCH_CHECK(k <= L, "periodic: ", k, " segments for a chain of ", L, " stages");
        Schedule s = periodicSchedule(costs, k, L);
        const SimulationResult sim = simulate(costs, s);
        smallest = smallest < 0 ? sim.peak : std::min(smallest, sim.peak);
        if (sim.peak <= bytes && (best < 0 || sim.time < best)) {
          best = sim.time;
          schedule = s;
        }
      }
      TORCH_CHECK(!schedule.empty(), "no periodic schedule fits in ", tried,
                  "; the smallest that works needs ", formatBytes(smallest));
      break;
    }
    case Strategy::None: {
      schedule = noCheckpointSchedule(costs);
      TORCH_CHECK(limit.kind == MemoryLimit::Kind::Unlimited || unconstrained <= bytes,
                  "the no-checkpointing schedule needs ", formatBytes(unconstrained), ", above ",
                  tried);
      break;
    }
  }
  const SimulationResult sim = simulate(costs, schedule);
  plan.schedule = schedule;
  plan.predicted_peak = sim.peak;
  plan.predicted_time = sim.time;
  plan.validate();
}

torch::jit::Module checkpoint(const torch::jit::Module& module,
                              const std::vector<c10::IValue>& example_inputs,
                              const MemoryLimit& limit, const CheckpointOptions& options) {
  TORCH_CHECK(!module.hasattr(kPlanAttribute),
              "this module was already rewritten by jitckpt; "
              "call checkpoint on the original module instead");
  TORCH_CHECK(module.find_method("forward"), "the module has no forward method to checkpoint");
  auto report = [&](const std::string& line) {
    if (options.progress)
      options.progress(line);
    else
      std::cerr << "jitckpt: " << line << "\n";
  };
  // The clone shares parameters and buffers with `module` but has its own forward, inlined and
  // partitioned in place.
  PartitionOptions partition_options;
  partition_options.max_stages = options.max_stages;
  PartitionedClone cloned = partitionClone(module, partition_options, /*share_tensors=*/true);
  torch::jit::Module& rewritten = cloned.module;
  Partition& partition = cloned.partition;
  report("partitioned forward into " + std::to_string(partition.stages.size()) + " stages");

  ChainArguments arguments = prologueArguments(rewritten, partition, example_inputs);
  auto plan = Plan::fromPartition(partition);
  plan->slots = options.slots;
  for (const auto& t : arguments.inputs) plan->input_shapes.push_back(t.sizes().vec());
  ProfileOptions profile_options;
  profile_options.repeats = options.profile_repeats;
  if (options.progress) {
    profile_options.progress = [&](int stage, int total) {
      if (stage == total || stage % 10 == 0)
        report("profiled stage " + std::to_string(stage) + "/" + std::to_string(total));
    };
  }
  if (options.costs) {
    TORCH_CHECK(options.costs->length() == plan->numStages() + 1, "the reused profile describes ",
                options.costs->length() - 1, " stages but this model has ", plan->numStages(),
                "; reuse only a profile of the same model and options");
    plan->costs = *options.costs;
    report("reusing the given profile");
  } else {
    ChainProfile profile;
    try {
      profile = profileStages(*plan, arguments, profile_options);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "the example inputs do not fit the model (running its stages failed): ",
                  e.what_without_backtrace());
    } catch (const std::exception& e) {  // the interpreter's errors
      TORCH_CHECK(
          false, "the example inputs do not fit the model (running its stages failed): ", e.what());
    }
    plan->costs = profile.costs;
  }
  solvePlan(*plan, limit, options.strategy, options.segments);
  report("solved (" + plan->strategy + "): predicted peak " +
         solver::formatBytes(plan->predicted_peak) + " of " +
         solver::formatBytes(plan->unconstrained_peak) + " unconstrained");
  rewriteChain(rewritten, partition, plan);
  return std::move(rewritten);
}

}  // namespace jitckpt
