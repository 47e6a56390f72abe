// Dead code elimination that keeps random draws. TorchScript's EliminateDeadCode deletes an op
// whose outputs nothing reads, but a draw that nothing reads still advances the generator in the
// model's own run (LayerDrop's torch.rand([]) where LayerDrop is 0, its comparison decided at
// capture): deleting it would hand every later dropout another mask. Takes a graph or a block;
// deletes what EliminateDeadCode deletes, but the ops that draw random numbers
// (runtime/stages.h, drawsRandomNumbers) and what they read.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace jitckpt {

void eliminateDeadCodeKeepingDraws(torch::jit::Block* block);
void eliminateDeadCodeKeepingDraws(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace jitckpt
