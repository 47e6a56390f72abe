#include "runtime/stage_backward.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <utility>

namespace jitckpt {

std::vector<at::Tensor> stageBackward(const std::vector<at::Tensor>& outputs,
                                      const std::vector<at::Tensor>& output_grads,
                                      const std::vector<at::Tensor>& wrt,
                                      size_t num_returned_leaves) {
  if (outputs.empty() || wrt.empty()) return std::vector<at::Tensor>(wrt.size());
  const bool lifted_are_leaves =
      std::all_of(wrt.begin() + static_cast<std::ptrdiff_t>(num_returned_leaves), wrt.end(),
                  [](const at::Tensor& t) { return t.is_leaf(); });
  if (!lifted_are_leaves) {
    return torch::autograd::grad(outputs, wrt, output_grads, /*retain_graph=*/false,
                                 /*create_graph=*/false, /*allow_unused=*/true);
  }
  torch::autograd::backward(outputs, output_grads, /*retain_graph=*/false, /*create_graph=*/false,
                            wrt);
  std::vector<at::Tensor> grads(wrt.size());
  for (size_t i = 0; i < num_returned_leaves; ++i) {
    grads[i] = std::exchange(wrt[i].mutable_grad(), at::Tensor());
  }
  return grads;
}

}  // namespace jitckpt
