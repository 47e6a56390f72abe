// Example inputs to plan on. withForwardDefaults completes them as a call would, with the
// defaults of the arguments left out. examplesToRunOn takes a graph that runs on the example
// inputs (the inlined forward, or the part of it before the chain) and the inputs; returns copies
// of their tensors (detached, requires_grad kept, inside lists, tuples and dicts too) when the
// graph may write one of its inputs in place (x.mul_(2) in forward), else the inputs themselves:
// planning runs the model on its examples, and checkpoint(model, inputs) must leave the caller's
// tensors as they were.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <vector>

namespace jitckpt {

// Whether a node of `graph` (nested blocks included) may write a graph input other than self, or
// a tensor inside one, in place. Writes to attributes are not counted.
bool writesItsInputs(const std::shared_ptr<torch::jit::Graph>& graph);

// `inputs` (forward's arguments without self) followed by the defaults of the arguments after them,
// as model(*inputs) gets them; an error that names the first one left out without a default, or
// says how many forward takes when there are too many. An empty `inputs` stays empty (no examples).
std::vector<c10::IValue> withForwardDefaults(const torch::jit::Module& module,
                                             std::vector<c10::IValue> inputs);

std::vector<c10::IValue> examplesToRunOn(const std::shared_ptr<torch::jit::Graph>& graph,
                                         const std::vector<c10::IValue>& example_inputs);

}  // namespace jitckpt
