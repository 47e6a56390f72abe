// Stage runs under torch.autocast: takes the caller's autocast state (AutocastState, read as the
// chain call begins), the chain's stages and the values of the call; gives the scope each run of a
// stage runs in (the call's state, also on autograd's thread in the backward, with autocast's cache
// of cast weights kept to the stage), the chain's device type where that state casts on it, the
// casts a run without grad makes up front, and the warning for a weight several stages cast.
// StageRunner (stage_runner.h) runs every stage through them.
#pragma once

#include <ATen/core/stack.h>
#include <c10/core/DeviceType.h>

#include <optional>
#include <vector>

#include "runtime/chain_arguments.h"
#include "runtime/compat.h"
#include "runtime/stages.h"

namespace jitckpt {

// Runs a stage under the autocast state of the call (torch.autocast is thread-local: a
// recomputation in the backward runs on autograd's thread, outside the caller's context, and
// torch.utils.checkpoint restores it the same way), and keeps autocast's cache of cast weights
// to the stage: the cache holds every cast until the caller's outermost autocast region ends, so
// that casts made by the stages would pile up over the whole forward, outside the plan.
//  - A recording run (AsTheCaller) casts each weight once, as the unmodified model does (a weight
//    an LSTM reads at every step: its gradient is summed in the autocast dtype), and empties the
//    cache when it ends. What the stage's graph saved of its casts stays with the graph, counted
//    in abar by the profile.
//  - A run without grad (F∅, Fck: CachedForTheStage) computes values only, and must compute those a
//  recording run
//    computes. PyTorch 2.x's matmul (and linear, which calls it) picks its kernel by whether the
//    2-D operand requires grad, and a cast weight requires grad only when made under grad: such
//    a run gets the casts of the weights it reads made under grad (castWeightsAsRecording),
//    cached, and empties the cache when it ends. (None may stay: handed to a later use of the
//    weight outside the chain, a cast of this run's would skip the caller's own.)
//  - Other runs (inference: Uncached) cast with the cache off: a cast lives as long as the op
//  reading it.
class AutocastScope {
 public:
  enum class Casts { Uncached, AsTheCaller, CachedForTheStage };
  AutocastScope(const AutocastState& call, Casts casts);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState saved_;
  bool active_ = false;
  bool clears_ = false;
};

// The chain's device type where the call's autocast (`call`) casts on it; none elsewhere.
std::optional<c10::DeviceType> autocastDevice(const ChainArguments& arguments,
                                              const AutocastState& call);

// Puts in autocast's cache the casts, made under grad, of the weights stage l casts
// (ChainStages::castLifted), which `stack` holds from `first_lifted` on: in `call`'s dtype for
// `device`, autocastDevice's answer (AutocastScope says why).
void castWeightsAsRecording(const ChainStages& stages, int l, const torch::jit::Stack& stack,
                            size_t first_lifted, const AutocastState& call, c10::DeviceType device);

// Warns, once per chain, where several stages cast the same weight (tensors compared by
// `first_positions`, firstPositions of `arguments`' lifted tensors) that the call did not cast once
// for them: its gradient sums their parts in float32 where the unmodified model sums them in the
// autocast dtype.
void warnOfWeightsCastBySeveralStages(const ChainStages& stages, const ChainArguments& arguments,
                                      const std::vector<size_t>& first_positions);

// Under autocast the model casts a weight once per autocast region and sums the gradients of its
// uses in the autocast dtype, before the cast's backward. A weight that several stages read only
// through ops that autocast casts (ChainStages::castWhereverRead: ALBERT's shared layers) is cast
// here once (recorded, whatever the grad mode), for the caller to hand the cast to the stages in
// its place, so that autograd sums their gradients as the model does; each stage casting for itself
// would sum them in float32. Returns `lifted` with those casts in place, where autocast would cache
// the cast: a float32 leaf that requires grad, autocast's cache on, lifted under one name.
std::vector<at::Tensor> castSharedWeights(const ChainStages& stages, at::TensorList lifted);

}  // namespace jitckpt
