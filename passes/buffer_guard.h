// Restores every buffer of a module (recursively) when it goes out of scope: running forward on
// example inputs (the prologue, the size measurement) updates BatchNorm statistics in place.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <exception>
#include <utility>
#include <vector>

namespace jitckpt {

class ModuleBufferGuard {
 public:
  explicit ModuleBufferGuard(const torch::jit::Module& module) {
    for (const auto& buffer : module.named_buffers(/*recurse=*/true)) {
      if (buffer.value.defined()) saved_.emplace_back(buffer.value, buffer.value.detach().clone());
    }
  }
  // Never throws (a destructor may run while an error unwinds): a buffer that cannot be put back
  // is named in a warning. One that forward resized (resize_) gets its shape back first.
  ~ModuleBufferGuard() {
    at::NoGradGuard no_grad;
    for (auto& [live, copy] : saved_) {
      try {
        // (resized itself: a detached alias would take the shape alone)
        if (live.sizes() != copy.sizes()) live.resize_(copy.sizes());
        live.detach().copy_(copy);
      } catch (const std::exception& e) {
        TORCH_WARN("jitckpt: could not restore a buffer of shape ", copy.sizes(),
                   " after running forward on the example inputs: ", e.what());
      }
    }
  }
  ModuleBufferGuard(const ModuleBufferGuard&) = delete;
  ModuleBufferGuard& operator=(const ModuleBufferGuard&) = delete;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
};

}  // namespace jitckpt
