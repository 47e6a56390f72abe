// StageRunner's forward runs of a stage (see stage_runner.h), with the lifted values each run reads
// (buffers as the stage's first run read them); autocast's part of a run is in stage_autocast.cpp,
// the backward in stage_backward.cpp.
#include "runtime/stage_runner.h"

#include <ATen/Functions.h>
#include <ATen/SequenceNumber.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/functions/basic_ops.h>

#include <algorithm>
#include <set>
#include <utility>

#include "runtime/error_text.h"
#include "runtime/probes/memory_probe.h"
#include "runtime/stage_autocast.h"

namespace jitckpt {
namespace {

bool contains(const std::vector<size_t>& list, size_t value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

// Whether `v` is, or holds in a list, tuple or dict, a tensor that requires grad.
bool holdsTensorRequiringGrad(const c10::IValue& v) {
  bool found = false;
  v.visit([&](const c10::IValue& inner) {
    if (inner.isTensor() && inner.toTensor().defined() && inner.toTensor().requires_grad())
      found = true;
    return found;  // true: stop descending
  });
  return found;
}

}  // namespace

const at::Tensor& SideLeaves::leafFor(size_t position, size_t first, const at::Tensor& live) {
  const auto [it, inserted] = index_.emplace(first, entries_.size());
  if (inserted) entries_.emplace_back(position, live.detach().requires_grad_());
  return entries_[it->second].second;
}

StageRunner::StageRunner(std::shared_ptr<const ChainStages> stages, ChainArguments arguments,
                         BufferWrites buffer_writes)
    : stages_(std::move(stages)),
      arguments_(std::move(arguments)),
      buffer_writes_(buffer_writes),
      first_positions_(firstPositions(arguments_.lifted_tensors)),
      ran_(stages_->size() + 1, false),
      rng_(stages_->size() + 1),
      first_write_(arguments_.lifted_tensors.size(), 0),
      last_write_(arguments_.lifted_tensors.size(), 0),
      first_run_values_(stages_->size() + 1),
      autocast_(AutocastState::current()),
      autocast_device_(autocastDevice(arguments_, autocast_)) {
  TORCH_CHECK(arguments_.lifted_tensors.size() == stages_->numLiftedTensors() &&
                  arguments_.lifted_scalars.size() == stages_->numLiftedScalars(),
              "jitckpt::chain: the plan expects ", stages_->numLiftedTensors(),
              " lifted tensors and ", stages_->numLiftedScalars(), " lifted scalars but got ",
              arguments_.lifted_tensors.size(), " and ", arguments_.lifted_scalars.size(),
              "; the module and its plan do not match (re-run jitckpt.checkpoint on the original "
              "module)");
  TORCH_CHECK(arguments_.inputs.size() == stages_->stage(1).num_activation_inputs,
              "jitckpt::chain: got ", arguments_.inputs.size(),
              " chain inputs for a plan whose first stage takes ",
              stages_->stage(1).num_activation_inputs);
  for (size_t k = 0; k < stages_->lifted().size(); ++k) {
    if (stages_->lifted()[k].kind != LiftedKind::Scalar) continue;
    TORCH_CHECK(
        !holdsTensorRequiringGrad(arguments_.lifted_scalars[stages_->position(k)]),
        "jitckpt::chain: '", stages_->lifted()[k].name,
        "' holds a tensor that requires grad but reaches the chain inside an Optional, list, "
        "tuple or object, through which jitckpt cannot return a gradient; pass it as a "
        "Tensor (a parameter, buffer or forward input; where it is forward's own "
        "Optional[Tensor] argument, declare it Tensor and pass zeros for none)");
  }
  auto noteDevice = [&](const at::Tensor& t) {
    if (t.defined() && !t.is_cpu() &&
        std::find(devices_.begin(), devices_.end(), t.device()) == devices_.end()) {
      devices_.push_back(t.device());
    }
  };
  std::vector<bool> inputs_require_grad;
  for (const auto& t : arguments_.inputs) {
    inputs_require_grad.push_back(t.requires_grad());
    noteDevice(t);
  }
  std::vector<bool> lifted_require_grad;
  for (const auto& t : arguments_.lifted_tensors) {
    lifted_require_grad.push_back(t.defined() && t.requires_grad());
    noteDevice(t);
  }
  inputs_never_require_grad_ =
      stages_->inputsNeverRequireGrad(inputs_require_grad, lifted_require_grad);
  for (int l = 1; l <= stages_->size(); ++l) {
    for (size_t k : stages_->stage(l).mutated_lifted) {
      if (stages_->lifted()[k].kind == LiftedKind::Scalar) continue;
      const size_t first = first_positions_[stages_->position(k)];
      if (first_write_[first] == 0) first_write_[first] = l;
      last_write_[first] = l;
    }
  }
  if (buffer_writes_ == BufferWrites::FirstRunUpdates) keepEntryValues();
  if (autocast_device_) warnOfWeightsCastBySeveralStages(*stages_, arguments_, first_positions_);
}

c10::IValue StageRunner::liftedValue(int l, size_t j, bool recomputation) {
  const size_t k = stages_->stage(l).lifted[j];
  const size_t position = stages_->position(k);
  if (stages_->lifted()[k].kind == LiftedKind::Scalar) return arguments_.lifted_scalars[position];
  const at::Tensor& live = arguments_.lifted_tensors[position];
  // An Optional[Tensor] attribute holding None (conv bias=False) reaches the stage as None.
  if (!live.defined()) return c10::IValue();
  // (a group's list of written tensors is long: searched only where the answer matters)
  auto writes = [&] { return contains(stages_->stage(l).mutated_lifted, k); };
  if (buffer_writes_ == BufferWrites::ToClones) return writes() ? live.detach().clone() : live;
  // Buffers are updated once per step: a recomputation reads what the first run read (a spectral
  // norm's vector, a counter; BatchNorm in training reads none of its statistics) and writes to
  // a clone.
  const at::Tensor seen = stages_->readsValue(l, j) ? valueAtFirstRun(l, j, !recomputation) : live;
  return recomputation && writes() ? seen.detach().clone() : seen;
}

at::Tensor StageRunner::valueAtFirstRun(int l, size_t j, bool first_run) {
  const size_t k = stages_->stage(l).lifted[j];
  const at::Tensor& live = arguments_.lifted_tensors[stages_->position(k)];
  const size_t first = first_positions_[stages_->position(k)];
  // First runs go in stage order: a tensor no stage from l on writes still holds what l read,
  // and one no stage before l wrote holds what the call began with.
  if (first_run || last_write_[first] < l) {
    if (first_run && keepsFirstRunValue(l, first)) first_run_values_[l][k] = live.detach().clone();
    return live;
  }
  if (keepsEntryValue(l, first)) return entry_values_.at(first);
  const auto found = first_run_values_[l].find(k);
  TORCH_INTERNAL_ASSERT(found != first_run_values_[l].end(), "stage ", l,
                        " recomputed without a copy of '", stages_->lifted()[k].name,
                        "' from its first run");
  return found->second;
}

void StageRunner::forEachKeptValue(const std::function<void(int, size_t, size_t, bool)>& f) const {
  std::set<size_t> entries;
  for (int l = 1; l <= stages_->size(); ++l) {
    const StageSpec& stage = stages_->stage(l);
    for (size_t j = 0; j < stage.lifted.size(); ++j) {
      const size_t k = stage.lifted[j];
      if (stages_->lifted()[k].kind == LiftedKind::Scalar || !stages_->readsValue(l, j)) continue;
      if (!arguments_.lifted_tensors[stages_->position(k)].defined()) continue;
      const size_t first = first_positions_[stages_->position(k)];
      if (keepsEntryValue(l, first) && entries.insert(first).second) f(l, k, first, true);
      if (keepsFirstRunValue(l, first)) f(l, k, first, false);
    }
  }
}

// The tensors a stage reads before their first write: copied once, as the call began.
void StageRunner::keepEntryValues() {
  forEachKeptValue([&](int, size_t k, size_t first, bool entry) {
    if (entry)
      entry_values_[first] = arguments_.lifted_tensors[stages_->position(k)].detach().clone();
  });
}

int64_t StageRunner::keptValueBytes() const {
  int64_t bytes = 0;
  forEachKeptValue([&](int, size_t k, size_t, bool) {
    const at::Tensor& t = arguments_.lifted_tensors[stages_->position(k)];
    bytes += probes::allocatedBytes(t.device(), static_cast<int64_t>(t.numel() * t.element_size()));
  });
  return bytes;
}

bool StageRunner::entersAsLeaf(size_t k) const {
  if (stages_->lifted()[k].kind == LiftedKind::Scalar) return false;
  const at::Tensor& t = arguments_.lifted_tensors[stages_->position(k)];
  return t.defined() && t.requires_grad();
}

// Stages first run in order (each reads the one before), so the first state held is the oldest.
void StageRunner::restoreFirstRandomState() const {
  for (const auto& state : rng_) {
    if (state) {
      state->restore();
      return;
    }
  }
}

Tensors StageRunner::run(int l, const Tensors& activations, Mode mode, SideLeaves* side_leaves) {
  const StageSpec& stage = stages_->stage(l);
  const bool recomputation = ran_[l];
  c10::AutoGradMode grad_mode(mode == Mode::Inference ? c10::GradMode::is_enabled()
                                                      : mode == Mode::Record);
  torch::jit::Stack stack;
  stack.reserve(activations.size() + stage.lifted.size());
  for (const auto& t : activations) {
    // The copy is made under the stage's grad mode, so that when recording, the gradient flows
    // through it to the leaf.
    stack.emplace_back(stage.writes_activation_input ? t.clone() : t);
  }
  for (size_t j = 0; j < stage.lifted.size(); ++j) {
    const size_t k = stage.lifted[j];
    if (side_leaves && entersAsLeaf(k)) {
      // One leaf per tensor among those `side_leaves` holds: a tensor lifted twice (tied weights)
      // gets one, and so does one that several stages read in a whole-graph run, where autograd
      // then adds all its uses in one buffer, in the unmodified model's order.
      const size_t position = stages_->position(k);
      stack.emplace_back(side_leaves->leafFor(position, first_positions_[position],
                                              arguments_.lifted_tensors[position]));
    } else {
      stack.push_back(liftedValue(l, j, recomputation));
    }
  }
  // Random ops see the same numbers on recomputation: replay the generator state of the first
  // run, then put back the state the rest of the step expects.
  std::optional<RngState> resume;
  if (stages_->hasRandomOps(l)) {
    if (!rng_[l]) {
      rng_[l] = RngState::capture(devices_);
    } else {
      resume = RngState::capture(devices_);
      rng_[l]->restore();
    }
  }
  try {
    using Casts = AutocastScope::Casts;
    const bool casts_as_recording = mode == Mode::Forward && autocast_device_;
    const AutocastScope autocast(autocast_, mode == Mode::Record ? Casts::AsTheCaller
                                            : casts_as_recording ? Casts::CachedForTheStage
                                                                 : Casts::Uncached);
    if (casts_as_recording)
      castWeightsAsRecording(*stages_, l, stack, activations.size(), autocast_, *autocast_device_);
    torch::jit::InterpreterState(stages_->code(l)).run(stack);
  } catch (const std::exception& e) {  // c10::Error, and the interpreter's own errors
    if (resume) resume->restore();
    TORCH_CHECK(false, "jitckpt: stage ", l, " (", stage.label, ") failed: ", reasonOf(e));
  }
  if (resume) resume->restore();
  ran_[l] = true;
  Tensors outputs;
  outputs.reserve(stack.size());
  for (auto& v : stack) {
    TORCH_INTERNAL_ASSERT(v.isTensor(), "stage ", l, " (", stage.label, ") returned a ",
                          v.tagKind(), " where the partition promised a tensor");
    outputs.push_back(std::move(v).toTensor());
  }
  return outputs;
}

Tensors StageRunner::forward(int l, const Tensors& activations) {
  if (stages_->hasAutogradDependentKernels(l)) {
    Tensors outputs = recordedForward(l, activations).outputs;  // the graph goes with it
    for (auto& t : outputs) t = t.detach();
    return outputs;
  }
  Tensors detached;
  detached.reserve(activations.size());
  for (const auto& t : activations) detached.push_back(t.detach());
  return run(l, detached, Mode::Forward);
}

Tensors StageRunner::inference(int l, const Tensors& activations) {
  return run(l, activations, Mode::Inference);
}

bool RecordedStage::inputsGetGradients() const {
  return std::any_of(input_edges.begin(), input_edges.end(),
                     [](const auto& e) { return e.is_valid(); });
}

bool RecordedStage::outputsHaveGradients() const {
  return std::any_of(output_edges.begin(), output_edges.end(),
                     [](const auto& e) { return e.is_valid(); });
}

RecordedStage StageRunner::recordedForward(int l, const Tensors& activations) {
  RecordedStage recorded;
  recorded.stage = l;
  recorded.first_sequence_nr = at::sequence_number::peek();
  Tensors inputs;
  for (size_t i = 0; i < activations.size(); ++i) {
    const at::Tensor& t = activations[i];
    // The same tensor at two positions (a branch that returned its input) is one tensor in the
    // model, whose uses autograd adds in one buffer, one at a time: it gets one alias and one edge,
    // at its first position, so that the sums round as the model's do.
    const auto same =
        std::find_if(activations.begin(), activations.begin() + i,
                     [&](const at::Tensor& a) { return t.defined() && a.is_same(t); });
    if (same != activations.begin() + i) {
      inputs.push_back(inputs[same - activations.begin()]);
      recorded.input_edges.emplace_back();
      continue;
    }
    at::Tensor input = t.detach();
    torch::autograd::Edge edge;
    if (!(*inputs_never_require_grad_)[l - 1][i] && t.is_floating_point()) {
      // A node of the input's own, holding only its metadata: B captures what reaches it. A
      // leaf's AccumulateGrad would hold the input's storage as long as the graph lives.
      auto node = makeNode<torch::autograd::Identity>();
      node->add_input_metadata(input);
      edge = torch::autograd::Edge(std::move(node), 0);
      torch::autograd::impl::set_gradient_edge(input, edge);
    }
    recorded.input_edges.push_back(std::move(edge));
    inputs.push_back(std::move(input));
  }
  recorded.outputs = run(l, inputs, Mode::Record, &recorded.side_leaves);
  for (size_t i = 0; i < recorded.outputs.size(); ++i) {
    const at::Tensor& t = recorded.outputs[i];
    const bool requires_grad = t.defined() && t.requires_grad();
    TORCH_INTERNAL_ASSERT(
        !requires_grad || l == numStages() || !(*inputs_never_require_grad_)[l][i],
        "jitckpt: output ", i, " of stage ", l, " (", stages_->stage(l).label,
        ") requires grad where the analysis said it never does");
    recorded.output_edges.push_back(requires_grad ? torch::autograd::impl::gradient_edge(t)
                                                  : torch::autograd::Edge());
  }
  // (after gradient_edge, which makes a node for a view whose base was written in place)
  recorded.end_sequence_nr = at::sequence_number::peek();
  return recorded;
}

Tensors StageRunner::wholeGraphForward(int l, const Tensors& activations, SideLeaves* side_leaves) {
  return run(l, activations, Mode::Record, side_leaves);
}

}  // namespace jitckpt
