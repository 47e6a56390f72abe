// The kernels of jitckpt::chain(Tensor[] inputs, Tensor[] lifted_tensors, Any[] lifted_scalars,
// Plan plan) -> Tensor[]. The Autograd kernel wraps the executor in an autograd Function (its
// forward runs the schedule up to the first B, its backward the rest); with grad disabled, or
// nothing requiring grad, and on the backend keys (inference mode), the stages run straight
// through and nothing is saved. Registered in register.cpp.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <vector>

#include "runtime/plan.h"

namespace jitckpt {

std::vector<at::Tensor> chainAutograd(at::TensorList inputs, at::TensorList lifted_tensors,
                                      const c10::List<c10::IValue>& lifted_scalars,
                                      const c10::intrusive_ptr<Plan>& plan);
std::vector<at::Tensor> chainInference(at::TensorList inputs, at::TensorList lifted_tensors,
                                       const c10::List<c10::IValue>& lifted_scalars,
                                       const c10::intrusive_ptr<Plan>& plan);

}  // namespace jitckpt
