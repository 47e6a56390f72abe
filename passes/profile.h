// Profile pass (paper, section 5.1): takes a chain's stages (a Plan made from a Partition) and the
// example values that reach the chain; returns the per-stage costs of the paper's Table 1 as a
// solver::Chain with the zero-cost terminal stage appended, plus labels, per-stage details and the
// measured activation peak of the no-checkpointing schedule.
//
// Every stage runs exactly as the executor runs it (runtime/executor.cpp): on detached inputs
// (leaves requiring grad when floating point and stage > 1 or the chain input requires grad), a
// copy of its input when it writes it in place, and the lifted parameters, buffers and scalars.
// Memory comes from the device's probe (runtime/probes): the counting CPU allocator (exact bytes
// of every c10 allocation) or the CUDA caching allocator's allocated bytes. "Live" below means the
// probe's current bytes; each measurement takes the difference to a baseline read just before the
// operation, so what the caller holds (parameters, the example inputs) cancels out.
//
//   wa[l]    bytes of the distinct storages of stage l's outputs (a^l). wa[0]: the chain inputs.
//   wabar[l] live bytes after the recording forward (Fall) minus before, with the outputs kept
//            alive: the outputs plus everything the autograd graph saved, not the input (it was
//            live before). Raised to wa[l] when outputs alias the input.
//   of[l]    forward overhead: peak minus baseline minus what stays live afterwards, the larger of
//            the no-grad forward (Fck/F∅ keep a^l) and the recording forward (Fall keeps abar^l),
//            since the schedule charges one of[l] to all three.
//   wd[l-1]  bytes of the input gradient B(l) produces (delta^{l-1}); 0 for stage 1 when the chain
//            input needs no gradient. wd[L]: bytes of delta^L, ones_like(a^L) for the outputs that
//            require grad, as autograd hands them to the chain.
//   ob[l]    backward overhead: peak of torch::autograd::grad(outputs, inputs + lifted parameters,
//            delta) minus the baseline (delta^l, abar^l, a^{l-1} held) minus the input gradient.
//            The parameter gradients stay in: the paper counts the preallocated .grad buffers as
//            model memory, and a fresh gradient that is added into them is a transient of B. (The
//            executor keeps them until the chain's backward returns; see its header.)
//   uf[l]    median over `repeats` recording forwards (after `warmup` full F+B rounds), ms.
//   ub[l]    median over `repeats` backward calls, each after an untimed recording forward, ms.
//            On CUDA both are CUDA-event times on the current stream; on the CPU wall time.
// Memory values are measured once after the warm-up (deterministic on the CPU for deterministic
// kernels: the same allocations in the same order); times are medians because they are not.
//
// Model state: stages that update buffers (BatchNorm statistics, num_batches_tracked) run on
// copies of those buffers, the prologue runs under a guard that restores every module buffer, and
// the CPU (and CUDA) random generator state is restored after profiling.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <functional>
#include <string>
#include <vector>

#include "passes/partition.h"
#include "passes/solver/chain.h"
#include "runtime/plan.h"

namespace jitckpt {

// What the chain op receives: the boundary-0 tensors and the lifted values, split by kind in
// Partition::lifted order (Plan::lifted_position indexes into these).
struct ChainArguments {
  std::vector<at::Tensor> inputs;  // detached; requires_grad as computed by the prologue
  std::vector<at::Tensor>
      lifted_tensors;  // undefined for an Optional[Tensor] attribute that is None
  std::vector<c10::IValue> lifted_scalars;
};

// Runs the part of forward before the chain region (a copy of the method graph up to
// Partition::first_node whose outputs are the chain inputs and the lifted values, dead code
// removed) on the example inputs: method inputs without self. Runs with grad recording so that
// the chain inputs' requires_grad is what training sees; module buffers are restored afterwards.
ChainArguments prologueArguments(const torch::jit::Module& module, const Partition& partition,
                                 const std::vector<c10::IValue>& example_inputs);

struct ProfileOptions {
  int repeats = 5;  // timed runs per stage and direction; the median is kept
  int warmup = 1;   // untimed forward+backward rounds per stage before measuring
  // Called after each stage with (stage, total). Null: "jitckpt: profiling stage i/L" on stderr,
  // at most once a second (and for the last stage when anything was printed).
  std::function<void(int, int)> progress;
  // Also run the whole no-checkpointing schedule (Fall 1..L, B L..1) and measure its peak.
  bool measure_unconstrained_peak = true;
};

struct StageProfile {  // the measurements behind one stage's costs, for reports and tests
  std::string label;
  double forward_ms = 0, backward_ms = 0;
  int64_t output_bytes = 0;      // wa
  int64_t recorded_bytes = 0;    // live bytes after Fall minus before (wabar before max)
  int64_t input_grad_bytes = 0;  // wd[l-1]
  // Size of the stage's parameter gradients: they are added into .grad one at a time as B
  // makes them, so ob holds only the one in flight (all of them when a lifted tensor is not a
  // leaf).
  int64_t parameter_grad_bytes = 0;
  int64_t forward_overhead_no_grad = 0, forward_overhead_grad = 0;  // of = max of the two
  int64_t backward_overhead = 0;                                    // ob
};

struct ChainProfile {
  // L+2 entries: entry 0, stages 1..L, the terminal stage L+1. Times in milliseconds, sizes in
  // bytes.
  solver::Chain costs;
  std::vector<std::string> labels;   // labels[l] for l = 0..L+1 ("input", stages, "loss")
  std::vector<StageProfile> stages;  // stages[l-1] for l = 1..L
  std::string device;
  // The no-checkpointing peak as the simulator predicts it from `costs`.
  int64_t unconstrained_peak = 0;
  // The same schedule run for real, stage by stage as the executor runs it: peak live bytes above
  // the baseline plus a^0 and delta^L (held from the start in the simulator). Parameter
  // gradients are dropped as they are produced. -1 when not measured.
  int64_t measured_unconstrained_peak = -1;
};

// Profiles every stage of `plan` on `arguments` (from prologueArguments). The device is the one
// of the chain inputs (or the first lifted tensor). Throws (TORCH_CHECK) when a stage fails to
// run, with the stage's label.
ChainProfile profileStages(const Plan& plan, const ChainArguments& arguments,
                           const ProfileOptions& options = {});

// Convenience: prologue + Plan::fromPartition + profileStages on the original module.
ChainProfile profileChain(const torch::jit::Module& module, const Partition& partition,
                          const std::vector<c10::IValue>& example_inputs,
                          const ProfileOptions& options = {});

}  // namespace jitckpt
