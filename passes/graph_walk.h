// Walks a node and every node nested in its blocks, in program order: a node before the nodes of
// its blocks, blocks in order, and, when asked, each block's return node after its nodes (the
// uses of values that leave a block).
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <functional>

namespace jitckpt {

enum class BlockReturns { Skip, Visit };

inline void forEachNestedNode(torch::jit::Node* top,
                              const std::function<void(torch::jit::Node*)>& visit,
                              BlockReturns returns = BlockReturns::Skip) {
  visit(top);
  for (torch::jit::Block* block : top->blocks()) {
    for (torch::jit::Node* n : block->nodes()) forEachNestedNode(n, visit, returns);
    if (returns == BlockReturns::Visit) visit(block->return_node());
  }
}

}  // namespace jitckpt
