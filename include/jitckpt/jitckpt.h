// jitckpt for C++ users: train a TorchScript module in less memory.
//
//   torch::jit::Module model = torch::jit::load("model.pt");
//   model.train();
//   auto rewritten = jitckpt::checkpoint(model, {example_input},
//   jitckpt::MemoryLimit::parse("2GiB")); std::cout << jitckpt::planOf(rewritten)->str();
//
// Link libjitckpt (the passes, which install the re-planner) and libjitckpt_runtime (the
// jitckpt::chain op and the Plan class, registered when it loads; a process that only runs saved
// rewritten modules needs just this one).
#pragma once

#include "passes/checkpoint.h"  // checkpoint, CheckpointOptions, MemoryLimit, Strategy
#include "runtime/plan.h"       // Plan, planOf
