// Small named shims over the two supported libtorch lines: Debian's 1.13 (CPU) and the 2.x wheels.
#pragma once

#include <torch/version.h>

// c10::Allocator: `allocate` is const up to 2.2 and not from 2.3 on, when the pure virtual
// `copy_data` appeared.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define JITCKPT_ALLOCATE_CONST
#define JITCKPT_ALLOCATOR_HAS_COPY_DATA 1
#else
#define JITCKPT_ALLOCATE_CONST const
#define JITCKPT_ALLOCATOR_HAS_COPY_DATA 0
#endif

#include <torch/csrc/autograd/function.h>

namespace jitckpt {

// Whether autograd node `n` has hooks on the gradients it receives: tensor hooks and retain_grad()
// of the tensors it made. PyTorch 1.13 keeps them among the node's pre-hooks, 2.x apart.
inline bool hasGradientHooks(torch::autograd::Node& n) {
#if TORCH_VERSION_MAJOR >= 2
  return !n.pre_hooks().empty() || !n.tensor_pre_hooks().empty() || !n.retains_grad_hooks().empty();
#else
  return !n.pre_hooks().empty();
#endif
}

}  // namespace jitckpt
