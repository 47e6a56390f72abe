// The whole pipeline on a scripted module: partition -> profile -> solve -> rewrite.
// Takes a torch::jit::Module, example inputs and a memory limit; returns a clone of the module
// whose forward calls jitckpt::chain with the solved Plan. The input module is left untouched.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "passes/solver/chain.h"

namespace jitckpt {

// A memory limit for activations: bytes, or a fraction of the unconstrained activation peak
// (the peak of the no-checkpointing schedule, as predicted from the profile).
struct MemoryLimit {
  enum class Kind { Bytes, Fraction, Unlimited } kind = Kind::Unlimited;
  double value = 0;

  static MemoryLimit bytes(int64_t b) { return {Kind::Bytes, static_cast<double>(b)}; }
  static MemoryLimit fraction(double f) { return {Kind::Fraction, f}; }
  static MemoryLimit unlimited() { return {}; }
  // "2GiB", "512MiB", "1.5GB", "1000000" (bytes), "0.5" or "50%" (fraction), "none".
  static MemoryLimit parse(const std::string& text);
};

enum class Strategy { Optimal, Periodic, Revolve, None };
Strategy parseStrategy(const std::string& name);  // "optimal", "periodic", "revolve", "none"
std::string toString(Strategy strategy);

struct CheckpointOptions {
  int slots = 500;                 // memory discretization of the DP
  Strategy strategy = Strategy::Optimal;
  int segments = 0;                // periodic: segment count; 0 picks the fastest that fits
  int max_stages = 0;              // partition: 0 for no limit
  int profile_repeats = 5;         // timing: median of this many runs after a warm-up
  std::function<void(const std::string&)> progress;  // progress lines; null prints to stderr
  // Costs from an earlier profile of the same model and input shapes (Plan::costs): skips
  // profiling, so that trying several limits or strategies costs one profile.
  std::optional<solver::Chain> costs;
};

class Plan;
// Solves plan.costs for the limit with the strategy; fills schedule, predictions and curve.
void solvePlan(Plan& plan, const MemoryLimit& limit, Strategy strategy, int segments = 0);

// Partition, profile, solve and rewrite. Errors (TORCH_CHECK) say what was wrong and what to do:
// a module already rewritten, example inputs that do not fit forward, an impossible limit (with
// the smallest limit that works).
torch::jit::Module checkpoint(const torch::jit::Module& module,
                              const std::vector<c10::IValue>& example_inputs,
                              const MemoryLimit& limit, const CheckpointOptions& options = {});

}  // namespace jitckpt
