// Python values for a scripted module's forward, converted to the types forward declares.
//
// Converting by the declared types (torch::jit::toIValue, exported by libtorch_python) rather than
// by torch's type inference (toTypeInferredIValue) matters beyond exactness: from PyTorch 2.11 on,
// the inline inference calls a libtorch_python function that the library does not export, and an
// extension that uses it fails to load.
#pragma once

#include <pybind11/pybind11.h>
#include <torch/script.h>

#include <vector>

namespace jitckpt::bindings {

// `inputs` holds forward's arguments without self; an empty sequence gives none (the caller then
// plans at the first call).
std::vector<c10::IValue> forwardInputs(const torch::jit::Module& module,
                                       const pybind11::sequence& inputs);

}  // namespace jitckpt::bindings
