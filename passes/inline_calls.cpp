// Inline pass (see inline_calls.h).
#include "passes/inline_calls.h"

#include <torch/csrc/jit/passes/inliner.h>

#include <vector>

namespace jitckpt {
namespace {

bool hasCalls(const torch::jit::Block* block) {
  std::vector<const torch::jit::Block*> blocks{block};
  while (!blocks.empty()) {
    const auto* b = blocks.back();
    blocks.pop_back();
    for (const torch::jit::Node* n : b->nodes()) {
      if (n->kind() == c10::prim::CallMethod || n->kind() == c10::prim::CallFunction) return true;
      for (const auto* inner : n->blocks()) blocks.push_back(inner);
    }
  }
  return false;
}

}  // namespace

void inlineAllCalls(torch::jit::Graph& graph) {
  // With graph executor optimization off (torch.jit.optimized_execution(False)), Inline inlines
  // one level only, because callees' graphs are not pre-inlined: repeat until no call is left.
  for (int level = 0; level < 64 && hasCalls(graph.block()); ++level) torch::jit::Inline(graph);
}

}  // namespace jitckpt
