// Stage graphs as text for pickling: takes a graph; returns IR text that torch::jit::parseIR reads
// back, with tensor constants moved out into a list (parseIR cannot read them), and the reverse.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <string>
#include <vector>

namespace jitckpt {

// Appends the graph's tensor constants to `constants`; `count` gets how many.
std::string graphToText(torch::jit::Graph& graph, std::vector<at::Tensor>& constants,
                        int64_t& count);
// Takes `num_constants` tensors from constants[next...] and advances `next`.
std::shared_ptr<torch::jit::Graph> graphFromText(const std::string& text, int64_t num_constants,
                                                 const std::vector<at::Tensor>& constants,
                                                 size_t& next);

}  // namespace jitckpt
