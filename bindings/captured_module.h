// The export front end's C++ half: builds the TorchScript IR module that the planner takes from a
// training graph torch.export captured, without TorchScript's compiler (torch.jit.script, which
// PyTorch deprecates). Takes the graph as jitckpt/export/aten_graph.py encodes it: the model's
// state (attribute name, the user's own tensor, whether a parameter), forward's inputs (name, type
// name), the ATen calls in order (operator, overload, arguments, keyword arguments; a value made
// earlier as an object with `node` and `output`) and the outputs. Each call becomes a node of the
// operator export recorded; where export passed a Python number for a tensor argument,
// TorchScript's own schema matching picks the overload TorchScript would (add_.Scalar for
// add_.Tensor). Returns the module: its parameters and buffers the given tensors, forward returning
// a tuple. Throws (TORCH_CHECK) naming the call it cannot express.
#pragma once

#include <pybind11/pybind11.h>
#include <torch/csrc/jit/api/module.h>

#include <string>

namespace jitckpt::bindings {

torch::jit::Module buildCapturedModule(const std::string& name, const pybind11::list& state,
                                       const pybind11::list& inputs, const pybind11::list& calls,
                                       const pybind11::list& outputs);

// A `torch.autocast` block that switches autocast for the call, encoded the same way over its
// `num_inputs` tensors (its values' entries: the inputs, then its calls) and returning tensors:
// registered as a jitckpt::autocast_block (runtime/autocast_block.h) under the returned number,
// with the state the block sets on `device` (dtype and cache_enabled None: the caller's).
int64_t buildAutocastBlock(size_t num_inputs, const pybind11::list& calls,
                           const pybind11::list& outputs, const std::string& device, bool enabled,
                           const pybind11::object& dtype, const pybind11::object& cache_enabled);

}  // namespace jitckpt::bindings
