// The jitckpt::autocast_block op (see autocast_block.h).
#include "runtime/autocast_block.h"

#include <torch/csrc/jit/runtime/interpreter.h>

#include <deque>
#include <mutex>
#include <utility>

#include "runtime/compat.h"

namespace jitckpt {
namespace {

struct RegisteredBlock {
  RegisteredBlock(std::shared_ptr<torch::jit::Graph> graph, AutocastBlockState state)
      : graph(graph), code(std::move(graph), "jitckpt_autocast_block"), state(state) {}
  std::shared_ptr<torch::jit::Graph> graph;
  torch::jit::Code code;
  AutocastBlockState state;
};

std::mutex registered_blocks_mutex;
std::deque<RegisteredBlock> registered_blocks;  // a deque: a block's address never changes

const RegisteredBlock& blockAt(int64_t block) {
  std::lock_guard<std::mutex> lock(registered_blocks_mutex);
  TORCH_CHECK(block >= 0 && block < static_cast<int64_t>(registered_blocks.size()),
              "jitckpt: autocast block ", block,
              " is not registered in this process; capture the model again here");
  return registered_blocks[static_cast<size_t>(block)];
}

// The caller's autocast state, changed for one device as the block says; the caller's is put back
// when it ends.
class BlockAutocast {
 public:
  explicit BlockAutocast(const AutocastBlockState& block) : saved_(AutocastState::current()) {
    AutocastState inside = saved_;
    const bool cuda = block.device == c10::DeviceType::CUDA;
    TORCH_CHECK(cuda || block.device == c10::DeviceType::CPU,
                "jitckpt runs torch.autocast blocks for the CPU and CUDA only, not ",
                c10::DeviceTypeName(block.device));
    (cuda ? inside.cuda : inside.cpu) = block.enabled;
    if (block.dtype) (cuda ? inside.cuda_dtype : inside.cpu_dtype) = *block.dtype;
    if (block.cache_enabled) inside.cache = *block.cache_enabled;
    inside.makeCurrent();
  }
  ~BlockAutocast() { saved_.makeCurrent(); }
  BlockAutocast(const BlockAutocast&) = delete;
  BlockAutocast& operator=(const BlockAutocast&) = delete;

 private:
  AutocastState saved_;
};

}  // namespace

int64_t registerAutocastBlock(std::shared_ptr<torch::jit::Graph> graph, AutocastBlockState state) {
  std::lock_guard<std::mutex> lock(registered_blocks_mutex);
  registered_blocks.emplace_back(std::move(graph), state);
  return static_cast<int64_t>(registered_blocks.size()) - 1;
}

std::vector<at::Tensor> runAutocastBlock(int64_t block, std::vector<at::Tensor> inputs) {
  const RegisteredBlock& registered = blockAt(block);
  BlockAutocast autocast(registered.state);
  torch::jit::Stack stack(inputs.begin(), inputs.end());
  torch::jit::InterpreterState(registered.code).run(stack);
  TORCH_INTERNAL_ASSERT(stack.size() == 1, "an autocast block's graph returns one list");
  return stack.back().toTensorVector();
}

std::shared_ptr<torch::jit::Graph> autocastBlockGraph(int64_t block) {
  return blockAt(block).graph;
}

}  // namespace jitckpt
