// Inline pass: takes a graph; inlines every prim::CallMethod and prim::CallFunction, nested ones
// included, from each callee's own graph, then simplifies the result much as the graph
// executor's pre-optimization does (the peepholes on lists and dicts, not those that rewrite
// tensor ops; constant propagation of immutable types; constant pooling), so that the
// partition sees the whole forward as one graph. The callees' own
// graphs, not torch::jit::Inline's cached optimized graphs: those are pre-optimized or not
// depending on whether executor optimization was on when each callee first ran, so the partition of
// one model would depend on what the process ran before (a model first run under
// torch.jit.optimized_execution(False) lost the cuts between its transformer layers).
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace jitckpt {

void inlineAllCalls(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace jitckpt
