// Strip pass: takes a module rewritten by jitckpt; returns a clone (sharing parameters and buffers)
// whose forward is the original one again, without the jitckpt::chain op or the plan attribute, so
// that it exports, scripts and runs where jitckpt is not installed. The rewrite keeps the original
// forward as the method kOriginalForward for this.
#pragma once

#include <torch/csrc/jit/api/module.h>

namespace jitckpt {

// The method that holds a copy of the forward graph as it was before the rewrite (inlined).
constexpr const char* kOriginalForward = "_jitckpt_original_forward";

// Errors (TORCH_CHECK) when `module` was not rewritten, or by a jitckpt that kept no original.
torch::jit::Module strip(const torch::jit::Module& module);

}  // namespace jitckpt
