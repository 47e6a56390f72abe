// Inline pass (see inline_calls.h).
#include "passes/inline_calls.h"

#include <torch/csrc/jit/passes/inliner.h>

#include "passes/graph_walk.h"

namespace jitckpt {
namespace {

bool hasCalls(torch::jit::Block* block) {
  bool found = false;
  for (torch::jit::Node* top : block->nodes()) {
    forEachNestedNode(top, [&](torch::jit::Node* n) {
      found = found || n->kind() == c10::prim::CallMethod || n->kind() == c10::prim::CallFunction;
    });
  }
  return found;
}

}  // namespace

void inlineAllCalls(torch::jit::Graph& graph) {
  // With graph executor optimization off (torch.jit.optimized_execution(False)), Inline inlines
  // one level only, because callees' graphs are not pre-inlined: repeat until no call is left.
  for (int level = 0; level < 64 && hasCalls(graph.block()); ++level) torch::jit::Inline(graph);
}

}  // namespace jitckpt
