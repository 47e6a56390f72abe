// Stable text form of a Partition for humans and FileCheck: the chain's boundaries (with sizes
// when shapes are known), its lifted inputs, and each stage's graph, stages numbered 1..L as in the
// plan and in errors. No addresses, no source ranges.
#pragma once

#include <ostream>
#include <string>

#include "passes/partition/partition.h"

namespace jitckpt {

// "%x : Float(2, 3, 8, 8) 1536 B" or "%x : Tensor" when the shape is unknown.
std::string describeValue(const torch::jit::Value* value);
void printPartition(std::ostream& out, const Partition& partition);

}  // namespace jitckpt
