// Restores every buffer of a module (recursively) when it goes out of scope: running forward on
// example inputs (the prologue, the size measurement) updates BatchNorm statistics in place.
#pragma once

#include <torch/csrc/jit/api/module.h>

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
  ~ModuleBufferGuard() {
    at::NoGradGuard no_grad;
    for (auto& [live, copy] : saved_) live.detach().copy_(copy);
  }
  ModuleBufferGuard(const ModuleBufferGuard&) = delete;
  ModuleBufferGuard& operator=(const ModuleBufferGuard&) = delete;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
};

}  // namespace jitckpt
