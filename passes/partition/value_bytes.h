// Value sizes for the partition. Takes a module, its inlined forward graph (before the partition
// edits it) and example inputs; runs the graph once on them, without recording gradients, with a
// copy instrumented to report the element count and dtype of every top-level tensor, so that no
// more is held than a forward holds; the module's buffers and the random generators are restored
// afterwards. Returns the bytes of each tensor (numel × element size, shared storage counted for
// each), keyed by the values of `graph`; a tensor that may be left uninitialized (by an early
// return) is left out. measureChainBytes does the same for a partition's chain region alone, on the
// arguments of one call of its chain.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <vector>

#include "passes/partition/partition.h"
#include "runtime/chain_arguments.h"
#include "runtime/stages.h"

namespace jitckpt {

ValueBytes measureValueBytes(const torch::jit::Module& module, const torch::jit::Graph& graph,
                             const std::vector<c10::IValue>& example_inputs);

// Runs the chain region of `partition` on `arguments`, whose lifted values are laid out as those
// of `stages` (the stages of a partition of the same forward), without recording gradients; the
// tensors that `stages` write in place (BatchNorm statistics) and the random generators are put
// back. Returns the bytes of the chain inputs and of each tensor that a top-level node of the
// region makes: all that a cut can carry. Empty when the lifted values do not match (attributes by
// name), the region reads a value from before it that is neither a chain input, a lifted value nor
// a constant, or it fails on these arguments.
ValueBytes measureChainBytes(const Partition& partition, const ChainStages& stages,
                             const ChainArguments& arguments);

}  // namespace jitckpt
