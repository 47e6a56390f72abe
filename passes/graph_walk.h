// Walks a node and every node nested in its blocks, in program order: a node before the nodes of
// its blocks, blocks in order, and, when asked, each block's return node after its nodes (the
// uses of values that leave a block). Also: whether a node's output may be left uninitialized.
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

// prim::Uninitialized stands for a value that another branch defines (an early return in
// TorchScript source becomes an If whose other branch yields it): output `output` of `n` may hold
// no value at run time. A block that raises never yields, so its placeholder is never seen
// (DenseNet's layers raise in the branch that would checkpoint themselves).
inline bool mayBeUninitialized(const torch::jit::Node* n, size_t output) {
  if (n->kind() == c10::prim::Uninitialized) return true;
  for (const torch::jit::Block* block : n->blocks()) {
    bool raises = false;
    for (const torch::jit::Node* inner : block->nodes())
      raises = raises || inner->kind() == c10::prim::RaiseException;
    if (!raises && output < block->outputs().size() &&
        block->outputs()[output]->node()->kind() == c10::prim::Uninitialized)
      return true;
  }
  return false;
}

}  // namespace jitckpt
