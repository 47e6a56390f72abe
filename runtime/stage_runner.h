// StageRunner: runs the stages of one chain call, the one way both the schedule executor and the
// profiler run them, so that what is measured is what runs. Takes the chain's stages and the
// values of one call (ChainArguments); runs a stage forward without recording (F∅, Fck), forward
// recording its autograd graph on detached leaf inputs (Fall), or backward from a recorded run (B).
//
// Exactness, for bit-identical results to running the stage graphs once, eagerly:
//  - a stage that writes its activation input in place runs on a copy, so a stored checkpoint
//    (or the recorded graph of the stage before) is never corrupted;
//  - buffers a stage updates in place (BatchNorm running statistics, num_batches_tracked) are
//    updated by its first run only (BufferWrites::FirstRunUpdates: recomputations write to
//    clones), or never (BufferWrites::ToClones, for profiling: every run writes to clones made
//    as it starts, as a recomputation does, so that its measurement counts them);
//  - a stage with random ops (dropout) replays on later runs the generator state its first run
//    saw, and leaves the generators as it found them.
// Errors name the stage.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/edge.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "runtime/chain_arguments.h"
#include "runtime/compat.h"
#include "runtime/rng_state.h"
#include "runtime/stages.h"

namespace jitckpt {

// Runs `body` inside a backward node of its own, on the autograd engine's thread for `device`:
// where the executor runs B, inside the chain's backward. There each B's gradient call is
// reentrant and runs on that thread; called from elsewhere, it hands its CUDA work to that
// thread and waits for it, twice per call, which a profile would count into every B.
void runAsBackward(c10::Device device, const std::function<void()>& body);

// The leaves that lifted tensors requiring grad enter recorded runs as: one per tensor (a tensor
// lifted at several positions, tied weights, gets one), as (its first position in
// ChainArguments::lifted_tensors, the leaf), in the order the runs first read them. Found by
// first position in constant time: a chain run as one group reads thousands (ResNet-1001).
class SideLeaves {
 public:
  using Entry = std::pair<size_t, at::Tensor>;
  // The leaf of the tensor `live` at `position`, whose first position is `first`: made (a
  // detached alias that requires grad) where none is held yet.
  const at::Tensor& leafFor(size_t position, size_t first, const at::Tensor& live);
  std::vector<Entry>::iterator begin() { return entries_.begin(); }
  std::vector<Entry>::iterator end() { return entries_.end(); }
  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<size_t, size_t> index_;  // first position -> entry
};

// abar^l: a recorded run of stage l. Its inputs enter as detached aliases whose gradient edge
// (where floating point and a gradient flows) leads to a node of their own that holds no tensor,
// so that, as in the unmodified model, an input the stage's graph did not save is freed as soon
// as nothing else holds it; B(l) captures the gradients that reach those edges. The outputs are
// kept as tensors (a^l, which the next stage's forward reads) until releaseOutputs(), and as
// gradient edges (the roots of B) to the end. Lifted tensors that require grad (parameters, and
// side values: an embedding that several stages read) enter the run as detached leaves, one per
// tensor, by position in ChainArguments::lifted_tensors: B stops at them, so the graph before the
// chain and the parameters' AccumulateGrad (with the user's hooks, DDP's) are reached once, by
// autograd, with the gradient the op returns.
struct RecordedStage {
  int stage = 0;                                    // l
  std::vector<torch::autograd::Edge> input_edges;   // invalid where no gradient flows
  Tensors outputs;                                  // a^l; empty once released
  std::vector<torch::autograd::Edge> output_edges;  // invalid where the output needs no gradient
  SideLeaves side_leaves;
  // The autograd sequence numbers (at::sequence_number, per thread) the recording used: from
  // `first_sequence_nr` up to, not including, `end_sequence_nr`.
  uint64_t first_sequence_nr = 0, end_sequence_nr = 0;

  bool inputsGetGradients() const;
  bool outputsHaveGradients() const;
  // Drops a^l (the next stage's forward has read it for the last time); the graph keeps what it
  // saved of it.
  void releaseOutputs() { outputs.clear(); }
};

struct StageGradients {
  Tensors inputs;  // one per stage input, undefined where none (delta^{l-1})
  // Gradients of the lifted tensors that require grad (parameters and side values), by position
  // in ChainArguments::lifted_tensors. They flow back through the op, so that autograd delivers
  // them as it would for the unmodified model (.grad, torch.autograd.grad, hooks, DDP).
  std::vector<std::pair<size_t, at::Tensor>> lifted;
};

class StageRunner {
 public:
  enum class BufferWrites { FirstRunUpdates, ToClones };

  // Throws (TORCH_CHECK) when the arguments do not match the stages (counts of inputs, lifted
  // tensors and scalars), or when a lifted scalar is a tensor that requires grad (no gradient
  // could reach it).
  StageRunner(std::shared_ptr<const ChainStages> stages, ChainArguments arguments,
              BufferWrites buffer_writes);

  int numStages() const { return stages_->size(); }
  const ChainStages& stages() const { return *stages_; }
  const ChainArguments& arguments() const { return arguments_; }
  // firstPositions of the lifted tensors, computed once per runner.
  size_t firstPosition(size_t position) const { return first_positions_.at(position); }
  // Whether activation input i of stage l never requires grad at this call (a recorded run gives
  // it no gradient edge).
  bool inputNeverRequiresGrad(int l, size_t i) const {
    return (*inputs_never_require_grad_).at(static_cast<size_t>(l) - 1).at(i);
  }
  const std::vector<c10::Device>& devices() const { return devices_; }  // non-CPU, in use

  // F∅/Fck(l): outputs without an autograd graph (kept). A stage whose kernels depend on the
  // autograd state (hasAutogradDependentKernels: PyTorch 2.x runs RNNs with other bits under
  // no_grad) runs as Fall does and its graph is dropped at once; the others run under no_grad.
  Tensors forward(int l, const Tensors& activations);
  // The stage as the caller's grad mode runs it, recording nothing (inference).
  Tensors inference(int l, const Tensors& activations);
  // Fall(l): the stage on detached aliases of its inputs, recording its autograd graph. An input
  // gets a gradient edge when floating point and it may require grad in the model (one
  // ChainStages::inputsNeverRequireGrad does not find never does, at this call).
  RecordedStage recordedForward(int l, const Tensors& activations);
  // B(l): consumes a recorded run and the gradients of its outputs (undefined: none); each
  // gradient is freed as soon as the backward is done with it, if the caller holds no copy.
  // `lifted_sums` (by firstPosition, or null): the gradients the stages after l gave each lifted
  // tensor so far. B(l) takes a tensor's sum in (leaving it undefined) and adds its own uses to
  // it one at a time, as the unmodified model's engine adds every use in the tensor's
  // InputBuffer: a stage that uses a parameter twice (a shared layer, a loop) returns
  // (sum + g_b) + g_a, not sum + (g_b + g_a), which rounds otherwise.
  StageGradients backward(int l, RecordedStage recorded, Tensors output_grads,
                          Tensors* lifted_sums = nullptr);
  // B(l), B(l-1), ..., B(m) in one call of the autograd engine, `run` holding abar^l first and
  // abar^m last: each stage's input edges lead on to the outputs of the stage below, and the
  // inputs returned are stage m's. One engine call per stage costs the host a graph task of its
  // own (an H200's host: about 75 us each on CUDA, 35 on the CPU). The results are those of the
  // B(k) one after another when every stage's graph was recorded after the one below
  // (ScheduleExecutor::backwardRunEnd says when): the engine runs the node made last first, so it
  // finishes a stage before it starts the one below, which gets every delta at once. Only abar^l
  // takes sums so far (`lifted_sums`); the others must read no tensor another stage of the run
  // reads, nor one with a sum so far.
  StageGradients backward(std::vector<RecordedStage> run, Tensors output_grads,
                          Tensors* lifted_sums = nullptr);
  // A run of B as the executor and the profile run it: backward(run, output_grads, &lifted_sums),
  // then each lifted tensor's gradient stored as its sum so far in `lifted_sums` (by
  // firstPosition). Returns delta^{m-1} as B made it: a slice of a larger gradient (cat's
  // backward) keeps the whole alive until the B that reads it, which the profile counts (wd);
  // copied out, it would reach that B with other strides, and its kernels could sum in another
  // order.
  Tensors backwardRun(std::vector<RecordedStage> run, Tensors output_grads, Tensors& lifted_sums);
  // Whether B of the stage recorded in `below` can join a run of B whose lowest stage is `above`
  // with the same results: `below` was recorded before `above` (by sequence numbers), its outputs
  // lead to distinct gradient edges (the order in which a shared one would get its deltas is what
  // would differ), and it reads no lifted tensor in `positions` (by firstPosition: those the run
  // reads, to which it adds its own when it joins) nor one with a sum so far in `lifted_sums`.
  bool joinsBackwardRun(const RecordedStage& above, const RecordedStage& below,
                        std::unordered_set<size_t>& positions, const Tensors& lifted_sums) const;
  // The firstPositions of the lifted tensors a recorded run reads as leaves.
  std::unordered_set<size_t> liftedPositions(const RecordedStage& recorded) const;
  // The stage recording its autograd graph on `activations` themselves (not on detached
  // copies), side values entering as leaves as in Fall (appended to `side_leaves`, one per
  // tensor over every stage run with the same list): for a backward that differentiates the whole
  // chain at once (retain_graph). Without `side_leaves`, on the lifted tensors themselves too: the
  // unmodified model's graph.
  Tensors wholeGraphForward(int l, const Tensors& activations, SideLeaves* side_leaves);

  // Puts the random generators back to the state the first random stage of the call found (as
  // the call began); nothing where none ran.
  void restoreFirstRandomState() const;

  // The lifted tensors of stage l that get gradients (parameters, and tensors computed before
  // the chain that require grad).
  Tensors gradientTargets(int l) const;

  // The bytes of the copies of written tensors that a BufferWrites::FirstRunUpdates runner keeps
  // to the end of the call, for recomputations to read what a first run read (a spectral norm's
  // vector, a counter), whichever mode this runner writes in: held by the whole step.
  int64_t keptValueBytes() const;

 private:
  enum class Mode { Inference, Forward, Record };
  Tensors run(int l, const Tensors& activations, Mode mode, SideLeaves* side_leaves = nullptr);
  // Lifted tensors that require grad reach recorded runs as leaves of their own (RecordedStage).
  bool entersAsLeaf(size_t k) const;
  void takeLiftedSums(const RecordedStage& recorded, Tensors& lifted_sums,
                      torch::autograd::edge_list& roots, Tensors& root_grads) const;
  c10::IValue liftedValue(int l, size_t j, bool recomputation);  // entry j of stage l's `lifted`
  // What lifted tensor k (entry j of stage l's `lifted`) held when stage l first ran, for a
  // recomputation; on the first run (`first_run`), keeps a copy where one is needed.
  at::Tensor valueAtFirstRun(int l, size_t j, bool first_run);
  // Calls f(l, k, first, entry) for each copy a FirstRunUpdates runner keeps: lifted tensor k
  // (firstPosition `first`) as the call began (`entry`: stage l reads it before its first
  // write; once per tensor) or as stage l first ran (between two writes).
  void forEachKeptValue(const std::function<void(int, size_t, size_t, bool)>& f) const;
  bool keepsEntryValue(int l, size_t first) const { return first_write_[first] >= l; }
  bool keepsFirstRunValue(int l, size_t first) const {
    return first_write_[first] < l && last_write_[first] >= l;
  }
  void keepEntryValues();

  std::shared_ptr<const ChainStages> stages_;
  ChainArguments arguments_;
  BufferWrites buffer_writes_;
  std::vector<c10::Device> devices_;
  // ChainStages::inputsNeverRequireGrad for this call's chain inputs.
  std::shared_ptr<const ChainStages::InputFlags> inputs_never_require_grad_;
  std::vector<size_t> first_positions_;       // firstPositions(lifted tensors)
  std::vector<bool> ran_;                     // per stage: run before in this runner
  std::vector<std::optional<RngState>> rng_;  // per stage with random ops: its first state
  // By firstPosition: the first and last stage that write the tensor in place (0: none).
  std::vector<int> first_write_, last_write_;
  // By firstPosition: what a tensor some stage writes held when the runner was made (the call
  // began), where a stage before its first write reads the value.
  std::map<size_t, at::Tensor> entry_values_;
  // Per stage: copies of what a lifted tensor held at the stage's first run, where a stage
  // between two writes reads the value.
  std::vector<std::map<size_t, at::Tensor>> first_run_values_;
  // The caller's autocast state when the runner was made (the call), under which every run of a
  // stage runs, also in the backward, where autograd's thread has its own.
  AutocastState autocast_;
  // autocastDevice (stage_autocast.h) of the call, found once: every run reads it.
  std::optional<c10::DeviceType> autocast_device_;
};

}  // namespace jitckpt
