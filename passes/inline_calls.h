// Inline pass: takes a graph; inlines every prim::CallMethod and prim::CallFunction, nested ones
// included (torch::jit::Inline goes one level deep when graph executor optimization is off), so
// that the partition sees the whole forward as one graph.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

namespace jitckpt {

void inlineAllCalls(torch::jit::Graph& graph);

}  // namespace jitckpt
