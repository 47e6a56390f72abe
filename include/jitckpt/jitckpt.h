// jitckpt for C++ users: train a TorchScript module in less memory.
//
//   torch::jit::Module model = torch::jit::load("model.pt");
//   model.train();
//   auto rewritten = jitckpt::checkpoint(model, {example_input},
//                                        jitckpt::MemoryLimit::parse("2GiB"));
//   std::cout << jitckpt::planOf(rewritten)->str();
//
// CMake: find_package(jitckpt) and target_link_libraries(app jitckpt::jitckpt). Including this
// header is enough for the jitckpt::chain op, the Plan class and the re-planner to register in
// the program, even one that only loads saved rewritten modules (see linkedLibrary below).
#pragma once

#include "passes/strip.h"          // strip
#include "planner/checkpoint.h"    // checkpoint, CheckpointOptions, MemoryLimit, Strategy
#include "planner/user_options.h"  // makeRequest: the options as Python and the CLI take them
#include "runtime/plan.h"          // Plan, planOf

namespace jitckpt {

// Defined in libjitckpt. Linkers drop a shared library that nothing references (Debian's default
// --as-needed), and then its load-time registrations never run: this reference keeps it.
bool linkedLibrary();

namespace detail {
[[maybe_unused]] inline const bool kLinked = linkedLibrary();
}  // namespace detail

}  // namespace jitckpt
