// The prologue: the part of the method graph before the chain region. Takes a Partition; returns
// a standalone graph (method inputs, `self` first) that computes the values the chain and the
// epilogue need from it, and runs it on example inputs to get what the chain op will receive.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <vector>

#include "passes/partition/partition.h"
#include "runtime/stage_runner.h"

namespace jitckpt {

// A copy of partition.graph up to the chain region whose outputs are `outputs` (values defined
// before the region), dead code removed.
std::shared_ptr<torch::jit::Graph> prologueGraph(const Partition& partition,
                                                 const std::vector<torch::jit::Value*>& outputs);

// Runs the prologue on the example inputs (method inputs without self) with grad recording, so
// that the chain inputs' requires_grad is what training sees; module buffers are restored
// afterwards. Returns the chain inputs (detached) and the lifted values, split by kind.
ChainArguments prologueArguments(const torch::jit::Module& module, const Partition& partition,
                                 const std::vector<c10::IValue>& example_inputs);

}  // namespace jitckpt
