// Value sizes for the partition. Takes a module, its inlined forward graph (before the partition
// edits it) and example inputs; runs the graph once on them, without recording gradients, with a
// copy instrumented to report the element count and dtype of every top-level tensor, so that no
// more is held than a forward holds; the module's buffers and the random generators are restored
// afterwards. Returns the bytes of each tensor (numel × element size, shared storage counted for
// each), keyed by the values of `graph`; a tensor that may be left uninitialized (by an early
// return) is left out.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <vector>

#include "passes/partition/partition.h"

namespace jitckpt {

ValueBytes measureValueBytes(const torch::jit::Module& module, const torch::jit::Graph& graph,
                             const std::vector<c10::IValue>& example_inputs);

}  // namespace jitckpt
