// ChainArguments: the values one call of the chain receives, and what is derived from them alone:
// the chain's device, the first position of each lifted tensor (tied weights are lifted once per
// attribute path), and the InputKey a plan is made for.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <optional>
#include <vector>

#include "runtime/input_key.h"
#include "runtime/stages.h"

namespace jitckpt {

using Tensors = std::vector<at::Tensor>;

// What the chain op receives: the boundary-0 tensors and the lifted values, split by kind
// (ChainStages::position indexes into lifted_tensors or lifted_scalars).
struct ChainArguments {
  Tensors inputs;
  Tensors lifted_tensors;  // undefined for an Optional[Tensor] attribute that is None
  std::vector<c10::IValue> lifted_scalars;
  // What the forward holds from before the chain besides heldFromStart, as the call measured it
  // (forward_start.h); 0 where it was not measured.
  int64_t held_before_chain_bytes = 0;
};

// Parameters the model reads only before the chain (`before`, a learned position embedding) or
// after it (`after`, a head the chain does not take), as the module holds them: which of them
// require grad decides the gradient bytes that come beside the chain's, so it is read again at
// each call. Process-local, never saved: `known` is false in a loaded plan, which keeps the bytes
// it was saved with.
struct OutsideParameters {
  bool known = false;
  Tensors before, after;
};

// Bytes of the gradients of those of `parameters` that require grad.
int64_t requiredGradientBytes(const Tensors& parameters);

// The key a plan is made for (see input_key.h): the chain inputs, then the side tensors and the
// tensors among the lifted scalars (a padding mask), in order, then the parameters' types; and
// which of `outside` are frozen.
InputKey inputKey(const ChainStages& stages, const ChainArguments& arguments,
                  const OutsideParameters& outside);

// The tensors a step holds from its start to its end: the chain inputs, its side tensors (a mask,
// positions) and the tensors among its lifted scalars (a float padding mask passed as an
// Optional[Tensor]). One made before the chain is memory the step allocates; one the model is
// called with counts as the chain's input does.
Tensors heldFromStart(const ChainStages& stages, const ChainArguments& arguments);

// The casts of weights that the call made for its stages (a weight several stages read, cast once
// under autocast: chain_op.cpp): its lifted parameters that are not leaves. A step holds them from
// the chain's start to its end.
Tensors castWeights(const ChainStages& stages, const ChainArguments& arguments);

// The chain's device: that of its first input or lifted tensor on an accelerator, else the CPU's
// when it holds a defined tensor (a flag carried as a CPU tensor beside CUDA activations does not
// make a CUDA chain a CPU one); none when it holds no tensor.
std::optional<c10::Device> chainDevice(const ChainArguments& arguments);

// For each position in `lifted`, the first position that holds the same tensor (tied weights are
// lifted once per attribute path): where the chain's backward sums that tensor's gradients. One
// pass with a hash map: a chain may lift thousands of tensors (ResNet-1001: about 6000).
std::vector<size_t> firstPositions(const Tensors& lifted);

}  // namespace jitckpt
