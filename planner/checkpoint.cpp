// The checkpoint pipeline (see checkpoint.h).
#include "planner/checkpoint.h"

#include <ATen/Parallel.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <set>

#include "passes/example_copies.h"
#include "passes/partition/module.h"
#include "passes/prologue.h"
#include "passes/recut.h"
#include "passes/rewrite.h"
#include "planner/profile.h"
#include "planner/solve.h"
#include "runtime/stage_autocast.h"

namespace jitckpt {
namespace {

// Options that no model can make valid, refused before any work (without example inputs they
// would fail only at the first training call).
void checkOptions(const CheckpointOptions& options) {
  // (the DP's table grows with slots times the stages squared: a million would take tens of GB)
  TORCH_CHECK(options.slots >= 1 && options.slots <= kMaxSlots,
              "jitckpt: slots (the memory slots of the DP) must be from 1 to ", kMaxSlots, ", not ",
              options.slots, "; the default is 500");
  TORCH_CHECK(options.segments >= 0, "jitckpt: segments must be 0 (the fastest that fits) or a ",
              "segment count, not ", options.segments);
  TORCH_CHECK(options.max_stages >= 0, "jitckpt: max_stages must be 0 (no cap) or a stage count, ",
              "not ", options.max_stages);
  TORCH_CHECK(options.profile_repeats >= 0, "jitckpt: profile_repeats must be 0 (the default) ",
              "or a count of timed runs per stage, not ", options.profile_repeats);
  TORCH_CHECK((options.strategy == Strategy::Given) == !options.given.empty(),
              "jitckpt: the strategy \"given\" runs the schedule given with it, and only it: give ",
              "a schedule (jitckpt.checkpoint(..., schedule=\"Fall(1) ... B(1)\")) or another "
              "strategy");
}

// The timed runs per stage: as asked, or the default where they are taken.
int profileRepeats(const CheckpointOptions& options, int by_default) {
  return options.profile_repeats > 0 ? options.profile_repeats : by_default;
}

solver::Costs measuredCosts(std::shared_ptr<const ChainStages> stages, const PrologueRun& prologue,
                            const MemoryLimit& limit, const CheckpointOptions& options,
                            const std::function<void(const std::string&)>& report) {
  const ChainArguments& arguments = prologue.arguments;
  if (options.costs) {
    TORCH_CHECK(options.costs->length() == stages->size() + 1, "the reused profile describes ",
                options.costs->length() - 1, " stages but this model has ", stages->size(),
                "; reuse only a profile of the same model and options");
    // Times and sizes hold for the inputs they were measured on only.
    const std::string key = inputKey(*stages, arguments, OutsideParameters{}).str();
    TORCH_CHECK(options.costs_input_key.empty() || options.costs_input_key == key,
                "the reused profile was measured on inputs ", options.costs_input_key,
                ", but these are ", key,
                ": its times and sizes do not hold for them; leave reuse_profile_of out to "
                "profile these inputs");
    for (int l : options.copying_stages) {
      TORCH_CHECK(l >= 1 && l <= stages->size(), "the reused profile names stage ", l,
                  " as one that copies its gradients, but this model has ", stages->size(),
                  " stages; reuse only a profile of the same model and options");
      stages->setCopiesParameterGradients(l);
    }
    report("reusing the given profile");
    return *options.costs;
  }
  ProfileOptions profile_options;
  profile_options.repeats = profileRepeats(options, kProfileRepeats);
  // Times depend on the intra-op pool (jitckpt starts no threads of its own): say its size.
  report("profiling " + std::to_string(stages->size()) + " stages, " +
         std::to_string(at::get_num_threads()) + " intra-op CPU thread(s)");
  if (options.profile_progress) {
    profile_options.progress = options.profile_progress;
  } else if (options.progress) {
    profile_options.progress = [&](int stage, int total) {
      if (stage == total || stage % 10 == 0)
        report("profiled stage " + std::to_string(stage) + "/" + std::to_string(total));
    };
  }
  profile_options.whole_schedule_room =
      wholeScheduleRoom(limit, arguments, /*in_training_call=*/false);
  profile_options.held_before_chain_bytes = prologue.held_beyond_bytes;
  ChainProfile profile = profileStages(std::move(stages), arguments, profile_options);
  if (!profile.ran_unconstrained) {
    report("the chain without checkpointing (" + solver::formatBytes(profile.unconstrained_peak) +
           ") does not fit the device's available memory: not run, stage times unscaled");
  }
  if (profile.measured_unconstrained_ms > 0) {
    // The calibration (ProfileOptions::calibration_runs): how far the stages' own times were from
    // a timed run of the whole chain; a factor far from 1 says the stage timings missed something.
    double summed_ms = 0;
    for (const StageProfile& s : profile.stages) summed_ms += s.forward_ms + s.backward_ms;
    char line[160];
    std::snprintf(line, sizeof line,
                  "timed the chain without checkpointing: %.4g ms; the stages' own times summed "
                  "to %.4g ms, scaled by %.4g",
                  profile.measured_unconstrained_ms, summed_ms, profile.time_scale);
    report(line);
  }
  return std::move(profile.costs);
}

// Gradient bytes of the parameters that require grad and whose attribute path is `counted`.
int64_t gradientBytesOf(const torch::jit::Module& module,
                        const std::function<bool(const std::string&)>& counted) {
  int64_t bytes = 0;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (p.value.requires_grad() && counted(p.name))
      bytes += static_cast<int64_t>(p.value.numel() * p.value.element_size());
  }
  return bytes;
}

// ... of the parameters that the chain does not read.
int64_t outsideGradientBytes(const torch::jit::Module& module, const Partition& partition) {
  std::set<std::string> in_chain;
  for (const LiftedInput& l : partition.lifted) {
    if (l.kind == LiftedKind::Parameter) in_chain.insert(l.name);
  }
  return gradientBytesOf(module, [&](const std::string& name) { return !in_chain.count(name); });
}

// The parameters that the epilogue reads (OutsideParameters::after), and those that the prologue
// reads and the chain and epilogue do not (before), as the module holds them.
OutsideParameters outsideParameters(const torch::jit::Module& module, const Partition& partition) {
  const std::vector<std::string> read_after = epilogueAttributePaths(partition);
  const std::vector<std::string> read_before = prologueAttributePaths(partition);
  const std::set<std::string> after(read_after.begin(), read_after.end());
  std::set<std::string> before(read_before.begin(), read_before.end());
  for (const LiftedInput& l : partition.lifted) {
    if (l.kind == LiftedKind::Parameter) before.erase(l.name);
  }
  OutsideParameters outside;
  outside.known = true;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (after.count(p.name))
      outside.after.push_back(p.value);
    else if (before.count(p.name))
      outside.before.push_back(p.value);
  }
  return outside;
}

}  // namespace

torch::jit::Module checkpoint(const torch::jit::Module& module,
                              const std::vector<c10::IValue>& given_inputs,
                              const MemoryLimit& limit, const CheckpointOptions& options) {
  checkOptions(options);
  const std::vector<c10::IValue> example_inputs = withForwardDefaults(module, given_inputs);
  auto report = [&](const std::string& line) {
    if (options.progress)
      options.progress(line);
    else
      std::cerr << "jitckpt: " << line << "\n";
  };
  PartitionOptions partition_options;
  partition_options.max_stages = options.max_stages;
  partition_options.every_cut = options.every_cut;
  PartitionedClone cloned =
      partitionClone(module, partition_options, /*share_tensors=*/true, example_inputs);
  report("partitioned forward into " + std::to_string(cloned.partition.stages.size()) + " stages");

  PrologueRun prologue = runPrologue(cloned.module, cloned.partition, example_inputs);
  auto stages = chainStagesOf(cloned.partition);
  prologue.arguments.lifted_tensors = castSharedWeights(*stages, prologue.arguments.lifted_tensors);
  const ChainArguments& arguments = prologue.arguments;
  SolveOptions solve_options{options.strategy, options.slots, options.segments, options.given};
  OutsideParameters outside = outsideParameters(cloned.module, cloned.partition);
  solve_options.epilogue_gradient_bytes = requiredGradientBytes(outside.after);
  solve_options.prologue_gradient_bytes = requiredGradientBytes(outside.before);
  const int64_t outside_bytes = outsideGradientBytes(cloned.module, cloned.partition);
  availableForActivations(limit, arguments, outside_bytes, solve_options);
  Solution solution = solveCosts(measuredCosts(stages, prologue, limit, options, report), limit,
                                 solve_options, inputKey(*stages, arguments, outside));
  solution.outside_gradient_bytes = outside_bytes;
  solution.outside_parameters = std::move(outside);
  solution.profile_repeats = profileRepeats(options, kProfileRepeats);
  auto plan = c10::make_intrusive<Plan>(std::move(stages), std::move(solution));
  const Solution& s = plan->solution();
  report("solved (" + solver::toString(s.strategy) + "): predicted peak " +
         solver::formatBytes(s.predicted_peak) + " of " +
         solver::formatBytes(s.unconstrained_peak) + " unconstrained");
  rewriteChain(cloned.module, cloned.partition, plan);
  return std::move(cloned.module);
}

torch::jit::Module checkpoint(const torch::jit::Module& module, const MemoryLimit& limit,
                              const CheckpointOptions& options) {
  checkOptions(options);
  TORCH_CHECK(!options.costs, "a reused profile needs the example inputs it was measured on");
  PartitionOptions partition_options;
  partition_options.max_stages = options.max_stages;
  partition_options.every_cut = options.every_cut;
  PartitionedClone cloned = partitionClone(module, partition_options, /*share_tensors=*/true);
  Solution solution =
      deferredSolution(limit, options.strategy, options.slots, options.segments, options.given);
  solution.profile_repeats = profileRepeats(options, kFirstCallProfileRepeats);
  solution.outside_gradient_bytes = outsideGradientBytes(cloned.module, cloned.partition);
  solution.outside_parameters = outsideParameters(cloned.module, cloned.partition);
  solution.epilogue_gradient_bytes = requiredGradientBytes(solution.outside_parameters.after);
  solution.prologue_gradient_bytes = requiredGradientBytes(solution.outside_parameters.before);
  auto plan = c10::make_intrusive<Plan>(chainStagesOf(cloned.partition), std::move(solution));
  plan->setVerbose(options.verbose);
  plan->setStageSource(
      std::make_shared<ForwardToCut>(cloned.partition.original_forward, partition_options));
  if (options.progress) {
    options.progress("partitioned forward into " + std::to_string(plan->numStages()) +
                     " stages by tensor count; the first training call cuts them again by bytes "
                     "and plans");
  }
  rewriteChain(cloned.module, cloned.partition, plan);
  return std::move(cloned.module);
}

}  // namespace jitckpt
