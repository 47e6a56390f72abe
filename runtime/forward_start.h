// jitckpt::forward_begins(...) -> (): the first op of a rewritten forward (passes/rewrite.cpp),
// taking the forward's arguments. A plan made within a training call (at the first call of a
// module rewritten without example inputs, or for new input shapes) must count in a^0 what the
// forward holds from before the chain besides the chain's own arguments (what the autograd graph
// of the ops before the chain saved, such as a LayerNorm's statistics over a table of positions;
// autocast's casts; values kept for after the chain), as a plan made with example inputs counts it
// from its own run of those ops (passes/prologue.h). The op starts a memory probe on the device of
// the first tensor among the arguments and notes their storages; the chain op takes the note as it
// starts (takeForwardStart), which ends the probe, and a plan made in that call reads the bytes
// (heldBeforeChainBytes). Without grad the op does nothing.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/chain_arguments.h"
#include "runtime/stages.h"

namespace jitckpt {

constexpr const char* kForwardBegins = "jitckpt::forward_begins";

struct ForwardStart;

// The op's kernel: notes the start of this thread's forward (replacing an earlier note).
void beginForward(const std::vector<c10::IValue>& arguments);

// This thread's note, with what the forward allocated since it began and still holds; null where
// the forward did not begin with the op (a module rewritten before it existed, or a call without
// grad).
std::shared_ptr<const ForwardStart> takeForwardStart();

// The bytes the forward holds beyond heldFromStart(stages, arguments): what it allocated since it
// began less the chain arguments it made (those not among its own arguments' storages); 0 without
// a note.
int64_t heldBeforeChainBytes(const ForwardStart* start, const ChainStages& stages,
                             const ChainArguments& arguments);

}  // namespace jitckpt
