// RngState: a restored state replays the random stream exactly, and restoring the CPU's allocates
// no tensor memory (the plan counts none for it).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/probes/counting_allocator.h"
#include "runtime/rng_state.h"

namespace jitckpt {
namespace {

// Uniform, Bernoulli (dropout's) and normal draws, the last of odd sizes so that the generator
// keeps a cached normal sample between calls.
std::vector<at::Tensor> draws() {
  return {torch::rand({17}), torch::bernoulli(torch::full({33}, 0.3)), torch::randn({1}),
          torch::randn({3}, torch::kDouble), torch::normal(0.0, 1.0, {5})};
}

TEST(RngState, RestoreReplaysTheStream) {
  torch::manual_seed(7);
  (void)torch::randn({1}, torch::kDouble);  // leaves a cached sample behind
  const RngState start = RngState::capture({});
  const auto first = draws();
  const RngState after = RngState::capture({});
  const auto second = draws();
  start.restore();
  const auto replayed = draws();
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(torch::equal(first[i], replayed[i])) << i;
  after.restore();
  const auto continued = draws();
  for (size_t i = 0; i < second.size(); ++i)
    EXPECT_TRUE(torch::equal(second[i], continued[i])) << i;
}

TEST(RngState, CpuRestoreAllocatesNoTensorMemory) {
  probes::CountingAllocatorGuard guard;
  probes::CountingAllocator& counting = guard.allocator();
  const RngState saved = RngState::capture({});
  (void)draws();
  const int64_t base = counting.resetPeak();
  saved.restore();
  { const RngStateGuard around({}); }
  EXPECT_EQ(counting.peakBytes(), base);
}

}  // namespace
}  // namespace jitckpt
