// Partition at module level. Takes a scripted module; returns its forward partitioned, either on a
// copy of the graph (to look at) or on a clone of the module whose own forward the rewrite then
// edits, and the runtime's view of the stages.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <optional>

#include "passes/partition/partition.h"
#include "runtime/stages.h"

namespace jitckpt {

// Copies and inlines `module`'s forward, then partitions it; the module is left as it is. With
// example inputs (method inputs without self), cuts are chosen by the bytes they carry on them
// (measureValueBytes), otherwise by tensor count.
Partition partitionModule(const torch::jit::Module& module, const PartitionOptions& options = {},
                          const std::vector<c10::IValue>& example_inputs = {});

// A clone of a module whose forward graph is inlined and partitioned in place: rewriteChain on
// `partition` edits `module`'s forward. The clone has its own class type and methods, so the
// original module keeps its forward; with share_tensors it shares parameters and buffers with the
// original (module.clone(/*inplace=*/true)), otherwise they are deep copies. Optional[Tensor]
// attributes that hold None (Conv2d's bias=False) are lifted as scalars (see bindOptionalTensors).
// Example inputs as for partitionModule. Errors (TORCH_CHECK) when the module was already
// rewritten or has no forward.
struct PartitionedClone {
  torch::jit::Module module;
  Partition partition;
};
PartitionedClone partitionClone(const torch::jit::Module& module,
                                const PartitionOptions& options = {}, bool share_tensors = true,
                                const std::vector<c10::IValue>& example_inputs = {});

// An Optional[Tensor] attribute that holds None cannot travel in the op's Tensor[]: marks it a
// scalar (it goes with the Any[]). Reads the current values of `module`'s attributes.
void bindOptionalTensors(const torch::jit::Module& module, Partition& partition);

// A Tensor[] attribute whose elements are its owner's own parameters or buffers (an RNN's
// _flat_weights) is read, in `module`'s inlined forward graph, as a list built from reads of those
// attributes, so that the partition lifts each one as a parameter and routes its gradient.
void bindTensorListAttributes(const torch::jit::Module& module, torch::jit::Graph& graph);

// The current value of the module attribute a prim::GetAttr chain from `self` reads; none where
// `value` is not such a chain.
std::optional<c10::IValue> attributeValue(const torch::jit::Module& module,
                                          const torch::jit::Value* value);

// The stages as the runtime holds them (graphs copied).
std::shared_ptr<const ChainStages> chainStagesOf(const Partition& partition);

}  // namespace jitckpt
