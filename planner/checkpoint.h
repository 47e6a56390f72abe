// The checkpoint pipeline on a scripted module: partition -> profile -> solve -> rewrite. Takes a
// torch::jit::Module, example inputs and a memory limit; returns a clone of the module (sharing
// its parameters and buffers) whose forward calls jitckpt::chain with the solved Plan. The input
// module is left untouched. Without example inputs, profile and solve wait for the first training
// call.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "solver/costs.h"
#include "solver/memory_limit.h"
#include "solver/strategy.h"

namespace jitckpt {

using solver::MemoryLimit;
using solver::Strategy;

constexpr int kProfileRepeats = 5;
constexpr int kMaxSlots = 100000;
constexpr int kFirstCallProfileRepeats = 3;

struct CheckpointOptions {
  int slots = 500;  // memory discretization of the DP
  Strategy strategy = Strategy::Optimal;
  int segments = 0;        // periodic: segment count; 0 picks the fastest that fits
  solver::Schedule given;  // strategy Given: the schedule to run (over the stages and the terminal)
  int max_stages = 0;      // partition: 0 for no limit
  bool every_cut = false;  // partition: PartitionOptions::every_cut (finer stages)
  // Timing: median of this many runs after a warm-up; 0: kProfileRepeats with example inputs,
  // kFirstCallProfileRepeats at the first training call (its profile is part of a training step).
  int profile_repeats = 0;
  std::function<void(const std::string&)> progress;  // progress lines; null prints to stderr
  // Called after each profiled stage with (stage, stages): progress bars. Given, it replaces the
  // "profiled stage" lines.
  std::function<void(int, int)> profile_progress;
  // Costs from an earlier profile of the same model and input shapes (Plan::solution().costs):
  // skips profiling, so that trying several limits or strategies costs one profile.
  std::optional<solver::Costs> costs;
  std::string costs_input_key;  // InputKey::str() of the inputs `costs` was measured on, if known
  // With `costs`: the stages whose B, in that profile, copied a parameter's gradient to the
  // parameter's layout (ChainStages::copiesParameterGradients), so that they head their groups
  // from the first step on.
  std::vector<int> copying_stages;
  // Rewritten without example inputs: show the first training call's profiling even when stderr
  // is not a terminal.
  bool verbose = false;
};

// Example inputs may stop before arguments that have defaults, as a call may. Errors (TORCH_CHECK)
// say what was wrong and what to do: a module already rewritten, example inputs that do not fit
// forward, a stage that fails on them, an impossible limit (with the smallest limit that works).
torch::jit::Module checkpoint(const torch::jit::Module& module,
                              const std::vector<c10::IValue>& example_inputs,
                              const MemoryLimit& limit, const CheckpointOptions& options = {});

// Without example inputs: partitions and rewrites now (cuts chosen by tensor count); the plan is
// made at the first training call, for its inputs and on its device, and again once for every new
// input key. Inference (no grad) never plans. The module saves and loads unplanned.
torch::jit::Module checkpoint(const torch::jit::Module& module, const MemoryLimit& limit,
                              const CheckpointOptions& options = {});

}  // namespace jitckpt
