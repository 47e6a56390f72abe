// Dead code elimination that keeps random draws (see keep_draws.h).
#include "passes/keep_draws.h"

#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <vector>

#include "passes/graph_walk.h"
#include "runtime/stages.h"

namespace jitckpt {

void eliminateDeadCodeKeepingDraws(torch::jit::Block* block) {
  // A draw nobody reads is read for the time of the elimination by a node that has side effects
  // (prim::Print), which EliminateDeadCode keeps with everything it reads.
  std::vector<torch::jit::Node*> readers;
  for (torch::jit::Node* top : block->nodes()) {
    forEachNestedNode(top, [&](torch::jit::Node* n) {
      if (!drawsRandomNumbers(n) || n->hasUses()) return;
      torch::jit::Node* reader = n->owningGraph()->create(c10::prim::Print, n->outputs(), 0);
      reader->insertAfter(n);
      readers.push_back(reader);
    });
  }
  torch::jit::EliminateDeadCode(block);
  for (torch::jit::Node* reader : readers) reader->destroy();
}

void eliminateDeadCodeKeepingDraws(const std::shared_ptr<torch::jit::Graph>& graph) {
  eliminateDeadCodeKeepingDraws(graph->block());
}

}  // namespace jitckpt
