// Tensor dicts pass: takes a module and its inlined forward graph; a dict that forward makes empty
// and fills with tensors under constant keys (torchvision's IntermediateLayerGetter, the features
// every segmentation and detection backbone returns) lives from forward's start to its end and
// leaves no position to cut at. Reads of a dict attribute under a constant key (the names of the
// layers to return) become the attribute's values, and the branches they decide are folded; then
// each such dict's reads become the tensors stored, and the dict is built, from those, only where
// something else uses it (forward's return). Later changes to such an attribute are not seen.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace jitckpt {

// Returns how many dicts were unpacked.
size_t unpackTensorDicts(const torch::jit::Module& module,
                         const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace jitckpt
