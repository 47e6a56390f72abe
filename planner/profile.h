// Profile pass (paper, section 5.1): takes a chain's stages and the values that reach the chain
// op (ChainArguments); returns the per-stage costs of the paper's Table 1 as solver::Costs with
// the zero-cost terminal stage appended, plus labels, per-stage details and the measured
// activation peak of the no-checkpointing schedule. Every stage runs through the runtime's
// StageRunner, as the executor runs it. What each cost measures, and how: docs/how-it-works.md,
// section "Profile".
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "passes/partition/partition.h"
#include "planner/storage_sharing.h"
#include "runtime/stage_runner.h"
#include "runtime/stages.h"
#include "solver/costs.h"

namespace jitckpt {

struct ProfileOptions {
  int repeats = 5;  // timed runs per stage and direction; the median is kept
  // False: memory only, no timed runs (uf, uf_nograd and ub stay 0): a re-plan takes the times
  // from the profiles of other sizes (solver::scaleTimes).
  bool time_stages = true;
  // Untimed forward+backward rounds per stage before measuring, and untimed runs of the whole
  // no-checkpointing schedule before timing it (calibration_runs; at least one where the whole
  // schedule runs: it notes the gradient layouts each B is handed, each B run alone).
  int warmup = 1;
  // Called after each stage with (stage, total). Null: "jitckpt: profiling stage i/L" on stderr,
  // at most once a second (and for the last stage when anything was printed).
  std::function<void(int, int)> progress;
  // Also run the whole no-checkpointing schedule (Fall 1..L, B L..1) and measure its peak.
  // Without it and without timing (sizes alone), that schedule does not run at all.
  bool measure_unconstrained_peak = true;
  // Time that schedule this many times (0: not at all) and scale every stage's times so that the
  // model's time of it is the median measured one. Stages timed alone, over and over, run faster
  // than in a whole step (their inputs stay in cache; the step's allocations and autograd's
  // bookkeeping are not theirs). One factor for all keeps the optimal schedule as it was (every
  // schedule's time scales alike) and makes the predicted times the measured ones.
  int calibration_runs = 3;
  // The runs of the whole schedule hold its whole peak: they happen only when the predicted
  // unconstrained peak is at most this many bytes (wholeScheduleRoom in solve.h), so that
  // profiling a chain too big for its device or its limit neither runs out of memory nor passes
  // the limit; the times then stay unscaled. -1: no bound.
  int64_t whole_schedule_room = -1;
  // Measure one stage of each set of twins (twin_stages.h: the same graph reading alike values)
  // and give the others its measurements, running them forward only to reach the next stage.
  bool twin_stages = true;
  // In a profile of sizes alone, a twin's outputs laid out as the measured stage's, without its
  // forward run, where no stage's memory can depend on values (twin_outputs.h).
  bool twin_outputs = true;
  // Bytes the forward holds from before the chain besides the chain's arguments, added to a^0
  // (PrologueRun::held_beyond_bytes): 0 where the prologue was not measured.
  int64_t held_before_chain_bytes = 0;
};

// The layout of a gradient handed to a B (undefined: none), as a step hands it: B(l+1) makes
// delta^l in the layout its ops give (channels-last from a convolution's backward, a slice of a
// cat's gradient), where measureMemory hands B(l) ones laid out as a^l.
struct GradientLayout {
  bool defined = false;
  std::vector<int64_t> sizes, strides;
  bool contiguous = false;
  // The earlier output handed this very gradient (-1: none): a B above that passes one gradient
  // on to several of its inputs (an add's) hands B(l) one tensor for several outputs, which is
  // freed only once B has read it for all of them.
  int same_as = -1;
  // Its storage: where it starts there (in elements), the storage's size, and the earlier output
  // handed another view of it (-1: none). A slice of a gradient that the step hands on past B(l)
  // (a skip's part of a cat's) keeps the whole storage held once B(l) has read its own slice.
  int64_t offset = 0;
  int64_t storage_elements = 0;
  int shares_storage_with = -1;
};
using GradientLayouts = std::vector<GradientLayout>;  // one per output of a stage

struct StageProfile {  // the measurements behind one stage's costs, for reports and tests
  std::string label;
  double forward_ms = 0, backward_ms = 0, forward_no_grad_ms = 0;
  int64_t output_bytes = 0;    // wa
  int64_t passed_bytes = 0;    // the part of wa that the input holds (Costs::passedBytes)
  int64_t recorded_bytes = 0;  // live bytes after Fall minus before (wabar before max)
  // a^l's layouts, none where B was handed no gradient (an output that requires none): what
  // measuredOn compares the gradients a step hands B with.
  GradientLayouts output_layouts;
  // The copies of the buffers the stage updates (BatchNorm's statistics) that a recomputation
  // writes to instead (StageRunner): its graph saves them (BatchNorm's backward takes the
  // statistics), so a recomputed abar holds them; the first run's writes the buffers themselves.
  int64_t written_copies_bytes = 0;
  int64_t input_grad_bytes = 0;        // B's own: wd[l-1] counts what it hands on as well
  GradientSources input_grad_sources;  // which storage each input gradient lies in
  // The layouts of the input gradients, per delta^l B was measured on (ones laid out as a^l,
  // then contiguous ones where a^l is not): what B(l) may hand B(l-1).
  std::vector<GradientLayouts> input_grad_layouts;
  // Size of the stage's parameter gradients: B returns them, so ob includes them; afterwards they
  // stay until the chain's backward hands them to autograd, as .grad would hold them.
  int64_t parameter_grad_bytes = 0;
  // The gradients B returned for lifted tensors (parameters and side values): the first position
  // of each tensor among the lifted ones (see firstPositions), and its bytes.
  std::vector<std::pair<size_t, int64_t>> lifted_gradients;
  int64_t forward_overhead_no_grad = 0;  // of_nograd
  int64_t forward_overhead_grad = 0;     // of
  int64_t backward_overhead = 0;         // ob
};

struct ChainProfile {
  // L+2 entries: entry 0, stages 1..L, the terminal stage L+1. Times in milliseconds, sizes in
  // bytes.
  solver::Costs costs;
  std::vector<std::string> labels;   // labels[l] for l = 0..L+1 ("input", stages, "loss")
  std::vector<StageProfile> stages;  // stages[l-1] for l = 1..L
  // twin_of[l-1]: the stage whose measurements stage l took (ProfileOptions::twin_stages), 0
  // where it was measured itself.
  std::vector<int> twin_of;
  int twins_not_run =
      0;  // twins whose outputs were made without a run (ProfileOptions::twin_outputs)
  std::string device;
  // The no-checkpointing peak as the simulator predicts it from `costs`.
  int64_t unconstrained_peak = 0;
  // Whether that schedule ran for real (the runs below): not where its peak, predicted before
  // the runs, did not fit ProfileOptions::whole_schedule_room.
  bool ran_unconstrained = false;
  // The same schedule run for real, stage by stage as the executor runs it, each B alone (as the
  // simulator has it): peak live bytes above the baseline plus a^0 and delta^L (held from the
  // start in the simulator). The lifted
  // tensors' gradients are held to the end, summed per tensor, as the executor holds them.
  // -1 when not measured.
  int64_t measured_unconstrained_peak = -1;
  // Median time of that schedule (ms, -1 when not run) and the factor the stage times in `costs`
  // were scaled by (ProfileOptions::calibration_runs); `stages` keeps the unscaled times.
  double measured_unconstrained_ms = -1;
  std::vector<double> unconstrained_run_ms;  // the timed runs, in order
  double time_scale = 1;
};

// Profiles every stage on `arguments` (from runPrologue). The device is the one of the chain
// inputs (or the first lifted tensor). Throws (TORCH_CHECK) when a stage fails to run, naming it.
ChainProfile profileStages(std::shared_ptr<const ChainStages> stages,
                           const ChainArguments& arguments, const ProfileOptions& options = {});

// Convenience: runPrologue + chainStagesOf + profileStages on the original module.
ChainProfile profileChain(const torch::jit::Module& module, const Partition& partition,
                          const std::vector<c10::IValue>& example_inputs,
                          const ProfileOptions& options = {});

}  // namespace jitckpt
