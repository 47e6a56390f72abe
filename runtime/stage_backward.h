// B(l) of one stage: takes the stage's recorded outputs with their gradients and the tensors to
// differentiate (first the leaves whose gradients it returns: the stage's detached inputs and the
// stand-ins of its side values, then its lifted tensors); returns one gradient per such tensor.
// Shared by the executor and the profiler, so that what is measured is what runs.
//
// When every lifted tensor is a leaf (parameters), autograd's AccumulateGrad adds each parameter
// gradient into .grad as soon as it is produced, as in the unmodified model, and their entries
// come back undefined: a stage's parameter gradients are never all alive at once (returning them
// together cost tens of MB of extra peak on ResNet-18's last blocks). The input leaves'
// gradients (and the side stand-ins') are taken back out of their .grad. Otherwise (a lifted tensor
// computed before the chain, whose gradient must flow back through the op; backward(inputs=) would
// retain_grad() it) autograd::grad returns every gradient together.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace jitckpt {

std::vector<at::Tensor> stageBackward(const std::vector<at::Tensor>& outputs,
                                      const std::vector<at::Tensor>& output_grads,
                                      const std::vector<at::Tensor>& wrt,
                                      size_t num_returned_leaves);

}  // namespace jitckpt
