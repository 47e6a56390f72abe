// Call values: takes a value of the partitioned forward graph defined before the chain (a lifted
// input); says whether it may differ between calls whose tensors have the same shapes, which the
// plan's input key does not see: an argument of forward that is not a tensor (an int, a float, an
// Optional[Tensor]), or a value computed before the chain from one or from a tensor's values
// (`.item()`, `int(t)`, an optional mask). Attributes, constants and sizes do not (the key holds
// the shapes).
#pragma once

#include <torch/csrc/jit/ir/ir.h>

namespace jitckpt {

bool variesBeyondShapes(const torch::jit::Value* v);

}  // namespace jitckpt
