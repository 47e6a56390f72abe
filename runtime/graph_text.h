// Stage graphs as text for pickling: takes a graph; returns IR text that torch::jit::parseIR reads
// back, with the constants that IR text cannot carry exactly moved out into a list of tensors,
// and the reverse. parseIR reads ints, bools and None; it cannot read tensors, tuples, -inf or
// NaN, so every other constant (in nested blocks too) leaves the text: a tensor as it is, any
// other value pickled into a uint8 tensor, bit for bit.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace jitckpt {

// The constants one graph's text left out, in the order of the graph's trailing inputs that
// stand for them.
struct MovedConstants {
  int64_t count = 0;
  std::vector<int64_t> pickled;  // which of them are pickled values (the others are tensors)
};

// Appends the graph's moved constants to `constants`; `moved` says how many and which kind.
std::string graphToText(torch::jit::Graph& graph, std::vector<at::Tensor>& constants,
                        MovedConstants& moved);
// Takes moved.count tensors from constants[next...] and advances `next`.
std::shared_ptr<torch::jit::Graph> graphFromText(const std::string& text,
                                                 const MovedConstants& moved,
                                                 const std::vector<at::Tensor>& constants,
                                                 size_t& next);

}  // namespace jitckpt
