// Restores every buffer of a module (recursively), or the tensors given, when it goes out of
// scope: running forward on example inputs (the prologue, the size measurement) updates BatchNorm
// statistics in place.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <exception>
#include <utility>
#include <vector>

namespace jitckpt {

class ModuleBufferGuard {
 public:
  explicit ModuleBufferGuard(const torch::jit::Module& module) {
    for (const auto& buffer : module.named_buffers(/*recurse=*/true)) keep(buffer.value);
  }
  explicit ModuleBufferGuard(const std::vector<at::Tensor>& buffers) {
    for (const at::Tensor& buffer : buffers) keep(buffer);
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
                   " after a measuring run of forward: ", e.what());
      }
    }
  }
  ModuleBufferGuard(const ModuleBufferGuard&) = delete;
  ModuleBufferGuard& operator=(const ModuleBufferGuard&) = delete;

 private:
  void keep(const at::Tensor& buffer) {
    if (buffer.defined()) saved_.emplace_back(buffer, buffer.detach().clone());
  }
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
};

}  // namespace jitckpt
