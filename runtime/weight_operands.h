// Whether a stage multiplies by a weight it computes: takes a stage's graph, how many of its inputs
// are activations (the lifted values follow them), and which lifted inputs may require grad
// (parameters, side tensors); returns whether an aten::matmul or aten::linear there reads, as an
// operand, a tensor computed from those alone (`w.t()`, `g * v`, a view of a tied weight).
//
// PyTorch 2.x's matmul folds a 3-D operand into an mm where the 2-D operand requires grad, and runs
// a bmm otherwise: such a weight requires grad under grad only, so F∅ (no grad) and Fall would
// compute other bits, and the stage must record in F∅ too
// (ChainStages::hasAutogradDependentKernels). Lifted tensors read as they are require grad either
// way; under autocast, F∅ casts parameters under grad as well (StageRunner).
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <vector>

namespace jitckpt {

bool multipliesByAComputedWeight(const torch::jit::Graph& graph, size_t num_activation_inputs,
                                 const std::vector<bool>& lifted_may_require_grad);

}  // namespace jitckpt
