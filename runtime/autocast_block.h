// jitckpt::autocast_block(int block, Tensor[] inputs) -> Tensor[]: a block of a captured graph that
// runs under an autocast state of its own, as a `torch.autocast` block in forward that switches
// autocast for the call runs (Hugging Face's rotary embeddings turn it off under the caller's
// autocast). Takes the block's graph (tensors in, a list of tensors out) and the state it sets for
// one device; registered once per process under the number that the op's call names. The op's
// kernel is CompositeImplicitAutograd, so autograd records the block's ops as it records the
// model's: it sets the state, runs the graph in TorchScript's interpreter and puts the caller's
// state back. To the partition the block is one op.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace jitckpt {

struct AutocastBlockState {
  c10::DeviceType device = c10::DeviceType::CPU;  // the device whose autocast the block sets
  bool enabled = false;
  std::optional<c10::ScalarType> dtype;  // unset: the caller's for that device
  std::optional<bool> cache_enabled;     // unset: the caller's
};

// Registers the block; returns its number. Blocks live as long as the process.
int64_t registerAutocastBlock(std::shared_ptr<torch::jit::Graph> graph, AutocastBlockState state);

// The op's kernel.
std::vector<at::Tensor> runAutocastBlock(int64_t block, std::vector<at::Tensor> inputs);

// The registered block's graph (for what the runtime asks of its ops: whether one draws random
// numbers, stages.h).
std::shared_ptr<torch::jit::Graph> autocastBlockGraph(int64_t block);

}  // namespace jitckpt
