// The prologue: the part of the method graph before the chain region. Takes a Partition; returns
// a standalone graph (method inputs, `self` first) that computes the values the chain and the
// epilogue need from it, and runs it on example inputs to get what the chain op will receive and
// what the forward holds besides.
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

// What the prologue's run on the example inputs gives: the chain's arguments (the chain inputs
// detached), and the bytes the forward holds from before the chain besides those arguments
// (heldFromStart): what the prologue's autograd graph saves for its backward (an embedding's
// positions, a projection's input cast by autocast), and autocast's casts of the weights it reads.
// A training step holds them to its end: the prologue's backward runs after the chain's.
struct PrologueRun {
  ChainArguments arguments;
  int64_t held_beyond_bytes = 0;
};

// Runs the prologue on the example inputs (method inputs without self) with grad recording, so
// that the chain inputs' requires_grad is what training sees, and measures its memory on the
// device of the examples (or of the parameters); module buffers are restored afterwards.
PrologueRun runPrologue(const torch::jit::Module& module, const Partition& partition,
                        const std::vector<c10::IValue>& example_inputs);

}  // namespace jitckpt
