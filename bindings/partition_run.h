// Runs a Partition piece by piece, as the runtime will: the prologue (method graph before the
// chain region), each stage graph alone on its boundary tensors and lifted inputs, then the
// epilogue. Takes the method inputs (`self` first); returns the method's outputs. For tests only
// (jitckpt._C.run_partitioned), so it lives in the bindings, not in libjitckpt: they check
// that the stages compose to the original method, and that the region is self-contained.
#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

#include "passes/partition/partition.h"

namespace jitckpt {

struct PartitionedRun {
  std::vector<c10::IValue> outputs;  // the method's outputs
  std::vector<std::vector<at::Tensor>>
      boundaries;  // boundary 0 (chain inputs) .. L (chain outputs)
};

PartitionedRun runPartitioned(const Partition& partition, std::vector<c10::IValue> method_inputs);

}  // namespace jitckpt
