// Recut pass: at a deferred plan's first training call, cuts the chain again by the bytes this
// call's tensors hold, as example inputs would have, where the rewrite (without inputs) could
// only count tensors. Takes what checkpoint kept of the forward (ForwardToCut), the plan's stages
// and the call's chain arguments; returns stages with the same chain inputs, outputs and lifted
// values, so that the rewritten module's chain call runs them as they are.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <utility>

#include "passes/partition/partition.h"
#include "runtime/chain_arguments.h"
#include "runtime/plan.h"
#include "runtime/stages.h"

namespace jitckpt {

// The inlined forward before the partition's edits (Partition::original_forward) and the options
// it was partitioned with.
struct ForwardToCut final : StageSource {
  ForwardToCut(std::shared_ptr<torch::jit::Graph> forward, PartitionOptions options)
      : forward(std::move(forward)), options(options) {}
  std::shared_ptr<torch::jit::Graph> forward;
  PartitionOptions options;
};

// The stages of `source` cut by the bytes of `arguments`; null when the new partition's inputs,
// outputs or lifted values differ from those of `stages` (the stages a deferred plan was
// rewritten with), or its region could not be measured: the plan keeps its stages then.
std::shared_ptr<const ChainStages> recutStages(const ForwardToCut& source,
                                               const ChainStages& stages,
                                               const ChainArguments& arguments);

}  // namespace jitckpt
