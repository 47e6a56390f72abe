// Profile pass (see profile.h): runs each stage through the runtime's StageRunner and measures
// the costs of the paper's Table 1 with the device's memory probe and stopwatch.
#include "planner/profile.h"

#include <ATen/Functions.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "passes/partition/module.h"
#include "passes/prologue.h"
#include "planner/stage_measurements.h"
#include "planner/twin_outputs.h"
#include "planner/twin_stages.h"
#include "runtime/probes/memory_probe.h"
#include "runtime/probes/stopwatch.h"
#include "runtime/rng_state.h"
#include "runtime/stage_autocast.h"
#include "solver/baselines.h"
#include "solver/simulator.h"

namespace jitckpt {
namespace {

// Prints "profiling stage i/L" at most once a second.
std::function<void(int, int)> defaultProgress() {
  auto last =
      std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  auto printed = std::make_shared<bool>(false);
  return [last, printed](int stage, int total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - *last >= std::chrono::seconds(1) || (stage == total && *printed)) {
      std::cerr << "jitckpt: profiling stage " << stage << "/" << total << "\n";
      *last = now;
      *printed = true;
    }
  };
}

struct UnconstrainedRun {
  int64_t peak = 0;  // see ChainProfile::measured_unconstrained_peak
  double ms = 0;
};

// The no-checkpointing schedule run for real, as the executor runs it (the backward passes on
// autograd's thread, runAsBackward), with the chain's output kept to the end as its caller keeps
// it (Costs::held_output). held_input_bytes: wa[0]. With handed (L+1 entries), each B runs alone
// (where the executor runs some in one engine call) and handed[l] gets the layouts of the
// gradients B(l) is handed.
UnconstrainedRun runUnconstrained(StageRunner& runner, const Tensors& chain_inputs,
                                  int64_t held_input_bytes, const Tensors& chain_outputs,
                                  c10::Device device, probes::MemoryProbe& probe,
                                  probes::Stopwatch& stopwatch,
                                  std::vector<GradientLayouts>* handed = nullptr) {
  const int L = runner.numStages();
  Tensors delta;
  for (const auto& t : chain_outputs)
    delta.push_back(t.is_floating_point() ? at::ones_like(t) : at::Tensor());
  const int64_t held_from_start = held_input_bytes + storageBytes(delta);
  std::vector<std::optional<RecordedStage>> recorded(L + 1);
  const int64_t base = probe.resetPeak();
  stopwatch.start();
  Tensors current = chain_inputs;
  for (int l = 1; l <= L; ++l) {
    recorded[l] = runner.recordedForward(l, current);
    current = recorded[l]->outputs;
    recorded[l]->releaseOutputs();  // as the executor: a^l goes once stage l+1 has read it
  }
  // Held to the end, as the executor holds them, each B adding its uses to the sum so far.
  Tensors lifted_grads(runner.arguments().lifted_tensors.size());
  // The B of consecutive stages in one engine call where they join (as the executor runs them).
  runAsBackward(device, [&] {
    for (int l = L; l >= 1;) {
      std::unordered_set<size_t> positions = runner.liftedPositions(*recorded[l]);
      int m = l;
      while (!handed && m > 1 &&
             runner.joinsBackwardRun(*recorded[m], *recorded[m - 1], positions, lifted_grads))
        --m;
      if (handed) (*handed)[l] = layoutsOf(delta);
      std::vector<RecordedStage> run;
      for (int k = l; k >= m; --k) {
        run.push_back(std::move(*recorded[k]));
        recorded[k].reset();
      }
      delta = runner.backwardRun(std::move(run), std::move(delta), lifted_grads);
      l = m - 1;
    }
    delta.clear();
    lifted_grads.clear();
  });
  current.clear();  // the chain's output, held until here
  UnconstrainedRun run;
  run.ms = stopwatch.stopSeconds() * 1e3;
  run.peak = probe.peakBytes() - base + held_from_start;
  return run;
}

// B(l) measured again, on ones laid out as the whole schedule handed it its gradients, where
// measureMemory did not measure it so (stages 1..L-1: B(L) is handed ones in both); ob[l] the
// larger. The stages' inputs come from a forward without grad, as the profile's own. `made`
// (optional, L + 1 entries): made[l-1] gets the layouts of the gradients each B(l) measured again
// made, which is what B(l-1) is handed.
void measureOnHandedLayouts(StageRunner& runner, const ChainArguments& arguments,
                            const std::vector<GradientLayouts>& handed,
                            const std::vector<GradientLayouts>& output_layouts,
                            probes::MemoryProbe& probe, ChainProfile& profile,
                            std::vector<GradientLayouts>* made = nullptr) {
  std::vector<bool> again(handed.size(), false);  // B(l) to measure again
  int last = 0;
  for (int l = 1; l + 1 < static_cast<int>(handed.size()); ++l) {
    again[l] = !measuredOn(handed[l], output_layouts[l]);
    if (again[l]) last = l;
  }
  if (last == 0) return;
  solver::Costs& c = profile.costs;
  Tensors current;
  for (const auto& t : arguments.inputs) current.push_back(t.detach());
  for (int l = 1; l <= last; ++l) {
    if (again[l]) {
      RecordedStage recorded = runner.recordedForward(l, current);
      Tensors deltas = onesLaidOut(handed[l], recorded.outputs);
      StageProfile remeasured;
      const int64_t ob =
          measureBackward(runner, l, std::move(recorded), std::move(deltas), probe, remeasured);
      if (made) (*made)[l - 1] = remeasured.input_grad_layouts.at(0);
      // Laid out otherwise, B may make what it handed on before (a reshape's backward copies a
      // permuted gradient; autograd adds a use into a gradient out of place beside a slice): the
      // sources of the run that made more of delta^{l-1}, and ob less what it makes beyond the
      // runs before, whose peaks the plan then still covers.
      GradientSources& sources = profile.stages[l - 1].input_grad_sources;
      const int64_t more = madeBytes(remeasured.input_grad_sources) - madeBytes(sources);
      if (more > 0) {
        c.ob[l] = std::max<int64_t>(0, c.ob[l] - more);
        sources = remeasured.input_grad_sources;
      }
      c.ob[l] = std::max(c.ob[l], ob);
    }
    if (l < last) current = runner.forward(l, current);
  }
}

// Without a whole run, a layout B(l+1) makes when handed ones laid out as a^{l+1} stands for
// what the step hands B(l); but B(l+1) is itself handed other layouts (a channels-last gradient
// through an elementwise stage). Each pass measures again the B whose handed layouts the B above,
// measured on its own handed layouts, makes otherwise, down the chain until none change.
void handOnLayouts(StageRunner& runner, const ChainArguments& arguments,
                   std::vector<GradientLayouts> handed,
                   const std::vector<GradientLayouts>& output_layouts, probes::MemoryProbe& probe,
                   ChainProfile& profile) {
  const size_t size = handed.size();
  for (size_t pass = 0; pass < size; ++pass) {
    std::vector<GradientLayouts> made(size);
    measureOnHandedLayouts(runner, arguments, handed, output_layouts, probe, profile, &made);
    bool changed = false;
    for (size_t l = 1; l + 1 < size; ++l) {
      const bool differs = !made[l].empty() && !sameLayouts(made[l], handed[l]);
      handed[l] = differs ? std::move(made[l]) : GradientLayouts{};
      changed = changed || differs;
    }
    if (!changed) return;
  }
}

// Scales uf, uf_nograd and ub by measured / predicted time of the no-checkpointing schedule (see
// ProfileOptions::calibration_runs); returns the factor, 1 when nothing was predicted.
double calibrateTimes(solver::Costs& c, double measured_ms) {
  const double predicted_ms = solver::simulate(c, solver::noCheckpointSchedule(c)).time;
  if (!(predicted_ms > 0) || !(measured_ms > 0)) return 1.0;
  const double scale = std::clamp(measured_ms / predicted_ms, 0.5, 2.0);
  for (auto* times : {&c.uf, &c.uf_nograd, &c.ub}) {
    for (double& t : *times) t *= scale;
  }
  return scale;
}

// Per stage, the bytes of the lifted tensors' gradients its B returns: `made` (wg) where it is
// the first B to return one (the last stage that reads the tensor), held to the end; `summed`
// where a later stage made it and B adds to that one.
struct LiftedGradientBytes {
  std::vector<int64_t> made, summed;
};

LiftedGradientBytes liftedGradientBytes(const std::vector<StageProfile>& stages) {
  LiftedGradientBytes bytes{std::vector<int64_t>(stages.size() + 2, 0),
                            std::vector<int64_t>(stages.size() + 1, 0)};
  std::set<size_t> made;
  for (size_t l = stages.size(); l >= 1; --l) {
    for (const auto& [position, size] : stages[l - 1].lifted_gradients)
      (made.insert(position).second ? bytes.made : bytes.summed)[l] += size;
  }
  return bytes;
}

void appendStage(solver::Costs& c, const StageProfile& s, int l) {
  c.uf.push_back(s.forward_ms);
  c.uf_nograd.push_back(s.forward_no_grad_ms);
  c.ub.push_back(s.backward_ms);
  c.wa.push_back(s.output_bytes);
  // (one size for every run: a first run is counted the copies a recomputation holds)
  c.wabar.push_back(
      std::max(s.recorded_bytes + s.passed_bytes + s.written_copies_bytes, s.output_bytes));
  c.wd[l - 1] = s.input_grad_bytes;
  c.wd.push_back(0);  // delta^l: set by stage l+1 (or by the caller for l = L)
  c.of.push_back(s.forward_overhead_grad);
  c.of_nograd.push_back(s.forward_overhead_no_grad);
  c.ob.push_back(s.backward_overhead);
}

// delta^L (one gradient per floating chain output), then the terminal stage L+1: the hand-off to
// autograd, free of cost.
std::vector<int64_t> outputGradientBytes(const Tensors& chain_outputs) {
  std::vector<int64_t> bytes;
  for (const auto& t : chain_outputs) {
    const auto nbytes = static_cast<int64_t>(t.numel() * t.element_size());
    bytes.push_back(t.is_floating_point() ? probes::allocatedBytes(t.device(), nbytes) : 0);
  }
  return bytes;
}

// wd as a step holds each delta: a gradient handed on keeps the storage it lies in.
void setHeldGradients(const ChainProfile& profile, const Tensors& chain_outputs, solver::Costs& c) {
  std::vector<GradientSources> sources;
  for (const auto& s : profile.stages) sources.push_back(s.input_grad_sources);
  const HeldGradients held = heldGradients(sources, outputGradientBytes(chain_outputs));
  std::copy(held.wd.begin(), held.wd.end(), c.wd.begin());
  c.wd_handed = held.handed;
  c.wd_handed.push_back(0);  // the terminal stage
}

void appendTerminalStage(solver::Costs& c, const Tensors& chain_outputs) {
  const auto output_grad_bytes = outputGradientBytes(chain_outputs);
  c.wd.back() = std::accumulate(output_grad_bytes.begin(), output_grad_bytes.end(), int64_t{0});
  for (auto* v : {&c.uf, &c.uf_nograd, &c.ub}) v->push_back(0);
  for (auto* v : {&c.wa, &c.wabar, &c.wd, &c.of, &c.of_nograd, &c.ob}) v->push_back(0);
  // The caller keeps the model's output through the backward (`out = model(x)`, then
  // `loss_fn(out, y).backward()`): counted as held to the end (Costs::held_output). Where the
  // module returns something smaller made from it (its own loss), that is memory to spare.
  c.held_output = storageBytes(chain_outputs);
}

}  // namespace

ChainProfile profileStages(std::shared_ptr<const ChainStages> stages,
                           const ChainArguments& arguments, const ProfileOptions& options) {
  TORCH_CHECK(options.repeats >= 1 && options.warmup >= 0,
              "profileStages: repeats must be >= 1 and warmup >= 0, got ", options.repeats, " and ",
              options.warmup);
  stages->checkWrittenTensorsShareNoMemory(arguments.lifted_tensors);
  const c10::Device device = chainDevice(arguments).value_or(c10::Device(c10::kCPU));
  auto probe = probes::makeMemoryProbe(device);  // first: it must see the frees of what follows
  auto stopwatch = probes::makeStopwatch(device);
  StageRunner runner(std::move(stages), arguments, StageRunner::BufferWrites::ToClones);
  const RngStateGuard rng({device});
  const auto progress = options.progress ? options.progress : defaultProgress();
  const int L = runner.numStages();

  ChainProfile profile;
  profile.device = device.str();
  solver::Costs& c = profile.costs;
  c = solver::Costs{};
  c.uf = c.uf_nograd = c.ub = {0};
  // a^0: what the step holds from its start to its end; besides the chain's own arguments, the
  // casts of weights the call made for its stages, the copies of written buffers the executor
  // keeps for recomputations, and what the forward holds from before the chain
  // (ProfileOptions::held_before_chain_bytes).
  Tensors held = heldFromStart(runner.stages(), arguments);
  for (const at::Tensor& cast : castWeights(runner.stages(), arguments)) held.push_back(cast);
  c.wa = {storageBytes(held) + runner.keptValueBytes() + options.held_before_chain_bytes};
  c.wabar = c.wd = c.of = c.of_nograd = c.ob = {0};
  profile.labels = {"input"};
  Tensors current;
  for (const auto& t : arguments.inputs) current.push_back(t.detach());
  SpanTracker spans;
  spans.add(0, current);
  std::vector<GradientLayouts> output_layouts(static_cast<size_t>(L) + 1);  // of a^l, as measured
  std::unordered_map<std::string, int> measured;  // twinKey -> the stage measured
  // Per stage measured, where its twins' outputs can be made without running them.
  std::vector<std::optional<TwinOutputLayout>> twin_layouts(static_cast<size_t>(L) + 1);
  const bool twin_outputs = options.twin_stages && options.twin_outputs && !options.time_stages &&
                            sizesIgnoreValues(runner.stages());
  for (int l = 1; l <= L; ++l) {
    StageProfile s;
    Tensors outputs;
    const auto key = options.twin_stages ? twinKey(runner, l, current) : std::nullopt;
    const auto twin = key ? measured.find(*key) : measured.end();
    if (twin != measured.end()) {
      s = twinProfile(runner, twin->second, profile.stages[twin->second - 1], l);
      const auto& layout = twin_layouts[twin->second];
      outputs = layout ? twinOutputs(*layout, current) : runner.forward(l, current);
      profile.twins_not_run += layout ? 1 : 0;
      profile.twin_of.push_back(twin->second);
    } else {
      s.label = runner.stages().stage(l).label;
      warmUp(runner, l, current, options.warmup);
      outputs = measureMemory(runner, l, current, *probe, s);
      if (options.time_stages)
        measureTimes(runner, l, current, options.repeats, device, *stopwatch, s);
      if (key) measured.emplace(*key, l);
      if (key && twin_outputs)
        twin_layouts[l] = twinOutputLayout(current, outputs, arguments.lifted_tensors,
                                           *runner.stages().stage(l).graph);
      profile.twin_of.push_back(0);
    }
    output_layouts[l] = s.output_layouts;
    appendStage(c, s, l);
    profile.labels.push_back(s.label);
    profile.stages.push_back(std::move(s));
    current = std::move(outputs);
    spans.add(l, current);
    progress(l, L);
  }
  c.spans = spans.spans();
  appendTerminalStage(c, current);
  c.runs_once = runner.stages().stagesThatRunOnce(device);
  setHeldGradients(profile, current, c);
  const LiftedGradientBytes lifted_gradients = liftedGradientBytes(profile.stages);
  c.wg = lifted_gradients.made;
  profile.labels.push_back("loss");
  solver::validate(c);
  profile.unconstrained_peak = solver::simulate(c, solver::noCheckpointSchedule(c)).peak;
  // At most `repeats` timed runs, so that a quick profile stays quick. They follow `warmup` untimed
  // ones: the first run of the whole schedule is the first to reach the step's full peak, and
  // its allocations fault in fresh memory, so that it runs slower than the runs after it (timed,
  // it put the predicted times above the measured ones).
  // The first run is untimed: it records the layouts of the gradients each B is handed.
  const int timed_runs =
      options.time_stages ? std::min(options.calibration_runs, options.repeats) : 0;
  const int untimed_runs = std::max(timed_runs > 0 ? options.warmup : 0, 1);
  const bool fits =
      options.whole_schedule_room < 0 || profile.unconstrained_peak <= options.whole_schedule_room;
  // Sizes alone (a re-plan): no run either, the handed layouts then taken from the B above, as
  // where the schedule does not fit.
  const bool wanted = timed_runs > 0 || options.measure_unconstrained_peak;
  const int runs = fits && wanted ? untimed_runs + timed_runs : 0;
  profile.ran_unconstrained = runs > 0;
  std::vector<GradientLayouts> handed(static_cast<size_t>(L) + 1);
  for (int r = 0; r < runs; ++r) {
    Tensors inputs;
    for (const auto& t : arguments.inputs) inputs.push_back(t.detach());
    const UnconstrainedRun run = runUnconstrained(runner, inputs, c.wa[0], current, device, *probe,
                                                  *stopwatch, r == 0 ? &handed : nullptr);
    if (r == 0 && options.measure_unconstrained_peak)
      profile.measured_unconstrained_peak = run.peak;
    if (r >= untimed_runs) profile.unconstrained_run_ms.push_back(run.ms);
  }
  if (runs > 0) {
    measureOnHandedLayouts(runner, arguments, handed, output_layouts, *probe, profile);
  } else {
    // No whole run (it would not fit): each delta^l in the layouts B(l+1) made it in when
    // measured (a transposed a^l's B handed contiguous ones makes its input's gradient
    // transposed, say), where B(l) was measured on ones laid out as a^l.
    // A stage with one variant takes part in the first pass only: measured again on the same
    // layouts, B would give the same ob.
    for (size_t variant = 0; variant < 2; ++variant) {
      bool any = false;
      for (int l = 1; l < L; ++l) {
        const auto& made = profile.stages[l].input_grad_layouts;
        handed[l] = variant < made.size() ? made[variant] : GradientLayouts{};
        any = any || variant < made.size();
      }
      if (any) handOnLayouts(runner, arguments, handed, output_layouts, *probe, profile);
    }
  }
  setHeldGradients(profile, current, c);  // with the sources measured on handed layouts
  // Where B(l) and a later B that made a gradient it adds to run in one engine call (a group),
  // autograd adds the two in the tensor's InputBuffer, in place only where it holds the first
  // one's storage alone, and that one is often a view whose base holds it too (a weight's
  // gradient, transposed twice): the add then makes a tensor of its size beside both. ob counts
  // it. (Between calls the runtime hands the sum so far without its base and the add is made in
  // place: such plans are a tensor's bytes cautious there.)
  for (int l = 1; l <= L; ++l) {
    c.ob[l] += lifted_gradients.summed[l];
    profile.stages[l - 1].backward_overhead = c.ob[l];
  }
  profile.unconstrained_peak = solver::simulate(c, solver::noCheckpointSchedule(c)).peak;
  if (fits && timed_runs > 0) {
    profile.measured_unconstrained_ms = probes::median(profile.unconstrained_run_ms);
    profile.time_scale = calibrateTimes(c, profile.measured_unconstrained_ms);
  }
  return profile;
}

ChainProfile profileChain(const torch::jit::Module& module, const Partition& partition,
                          const std::vector<c10::IValue>& example_inputs,
                          const ProfileOptions& options) {
  PrologueRun prologue = runPrologue(module, partition, example_inputs);
  ProfileOptions with_prologue = options;
  with_prologue.held_before_chain_bytes = prologue.held_beyond_bytes;
  auto stages = chainStagesOf(partition);
  prologue.arguments.lifted_tensors = castSharedWeights(*stages, prologue.arguments.lifted_tensors);
  return profileStages(std::move(stages), prologue.arguments, with_prologue);
}

}  // namespace jitckpt
