// Counting CPU allocator: exact live bytes, peak, counts, reset, nesting and restoration of the
// previous allocator; memory allocated before installation is freed by its own allocator.
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include "runtime/probes/counting_allocator.h"
#include "runtime/probes/memory_probe.h"
#include "runtime/probes/stopwatch.h"

namespace jitckpt::probes {
namespace {

constexpr int64_t kFloat = sizeof(float);

TEST(CountingAllocator, CountsLiveBytesAndPeakExactly) {
  CountingAllocatorGuard guard;
  CountingAllocator& counting = guard.allocator();
  const int64_t base = counting.resetPeak();
  const int64_t allocations = counting.allocations();
  const int64_t frees = counting.frees();
  {
    auto a = torch::empty({1000}, torch::kFloat);
    EXPECT_EQ(counting.currentBytes() - base, 1000 * kFloat);
    {
      auto b = torch::empty({10, 30}, torch::kDouble);
      EXPECT_EQ(counting.currentBytes() - base, 1000 * kFloat + 300 * 8);
    }
    EXPECT_EQ(counting.currentBytes() - base, 1000 * kFloat);
    EXPECT_EQ(counting.peakBytes() - base, 1000 * kFloat + 300 * 8);
    auto c = torch::empty({7}, torch::kByte);
    EXPECT_EQ(counting.currentBytes() - base, 1000 * kFloat + 7);
    EXPECT_EQ(counting.peakBytes() - base, 1000 * kFloat + 300 * 8);
  }
  EXPECT_EQ(counting.currentBytes(), base);
  EXPECT_EQ(counting.allocations() - allocations, 3);
  EXPECT_EQ(counting.frees() - frees, 3);
}

TEST(CountingAllocator, ViewsAndEmptyTensorsCostNothing) {
  CountingAllocatorGuard guard;
  CountingAllocator& counting = guard.allocator();
  const int64_t base = counting.resetPeak();
  auto a = torch::empty({64, 64});
  auto view = a.view({4096}).narrow(0, 10, 100);
  auto transposed = a.t();
  auto nothing = torch::empty({0});
  EXPECT_EQ(counting.currentBytes() - base, 64 * 64 * kFloat);
}

TEST(CountingAllocator, ResetPeakStartsFromCurrent) {
  CountingAllocatorGuard guard;
  CountingAllocator& counting = guard.allocator();
  const int64_t base = counting.resetPeak();
  auto kept = torch::empty({256});
  { auto transient = torch::empty({1024}); }
  EXPECT_EQ(counting.peakBytes() - base, (256 + 1024) * kFloat);
  EXPECT_EQ(counting.resetPeak() - base, 256 * kFloat);
  EXPECT_EQ(counting.peakBytes() - base, 256 * kFloat);
  { auto smaller = torch::empty({100}); }
  EXPECT_EQ(counting.peakBytes() - base, (256 + 100) * kFloat);
}

TEST(CountingAllocator, CountsKernelTemporariesAndOutputs) {
  CountingAllocatorGuard guard;
  CountingAllocator& counting = guard.allocator();
  auto x = torch::ones({128, 32});
  const int64_t base = counting.resetPeak();
  auto y = torch::exp(torch::exp(x));  // the inner exp is a temporary
  EXPECT_EQ(counting.currentBytes() - base, 128 * 32 * kFloat);
  EXPECT_EQ(counting.peakBytes() - base, 2 * 128 * 32 * kFloat);
}

TEST(CountingAllocator, GuardRestoresPreviousAllocatorAndNests) {
  c10::Allocator* before = c10::GetCPUAllocator();
  ASSERT_NE(before, &CountingAllocator::instance());
  {
    CountingAllocatorGuard outer;
    EXPECT_EQ(c10::GetCPUAllocator(), &CountingAllocator::instance());
    EXPECT_EQ(CountingAllocator::instance().inner(), before);
    {
      CountingAllocatorGuard inner;
      EXPECT_EQ(c10::GetCPUAllocator(), &CountingAllocator::instance());
    }
    EXPECT_EQ(c10::GetCPUAllocator(), &CountingAllocator::instance());
  }
  EXPECT_EQ(c10::GetCPUAllocator(), before);
  // Uninstalled: new allocations are not counted.
  const int64_t current = CountingAllocator::instance().currentBytes();
  auto uncounted = torch::empty({4096});
  EXPECT_EQ(CountingAllocator::instance().currentBytes(), current);
}

TEST(CountingAllocator, MemoryFromBeforeInstallationIsFreedUncounted) {
  auto early = torch::full({5000}, 3.0f);
  int64_t after_free = 0;
  int64_t frees = 0;
  {
    CountingAllocatorGuard guard;
    CountingAllocator& counting = guard.allocator();
    const int64_t base = counting.currentBytes();
    auto late = torch::empty({10});
    EXPECT_FLOAT_EQ(early.sum().item<float>(), 15000.0f);  // still valid under the new allocator
    frees = counting.frees();
    early = torch::Tensor();  // freed by the default allocator
    after_free = counting.currentBytes() - base;
    EXPECT_EQ(after_free, 10 * kFloat);
    EXPECT_EQ(counting.frees(), frees);
  }
}

TEST(CountingAllocator, CountedMemoryFreedAfterUninstallIsCounted) {
  torch::Tensor survivor;
  int64_t base = 0;
  {
    CountingAllocatorGuard guard;
    base = guard.allocator().currentBytes();
    survivor = torch::empty({300});
  }
  EXPECT_EQ(CountingAllocator::instance().currentBytes() - base, 300 * kFloat);
  survivor = torch::Tensor();
  EXPECT_EQ(CountingAllocator::instance().currentBytes(), base);
}

TEST(CountingAllocator, ResizeOfACountedStorageGoesThroughTheCounter) {
  CountingAllocatorGuard guard;
  CountingAllocator& counting = guard.allocator();
  const int64_t base = counting.currentBytes();
  auto t = torch::empty({10});
  t.resize_({1000});
  EXPECT_EQ(counting.currentBytes() - base, 1000 * kFloat);
}

TEST(CountingAllocator, RawInterfaceIsCounted) {
  CountingAllocatorGuard guard;
  CountingAllocator& counting = guard.allocator();
  ASSERT_NE(counting.raw_deleter(), nullptr) << "the default CPU allocator has a raw interface";
  const int64_t base = counting.resetPeak();
  void* raw = c10::GetCPUAllocator()->raw_allocate(1000);
  EXPECT_EQ(counting.currentBytes() - base, 1000);
  c10::GetCPUAllocator()->raw_deallocate(raw);
  EXPECT_EQ(counting.currentBytes(), base);
  EXPECT_EQ(counting.peakBytes() - base, 1000);
}

TEST(CountingAllocator, RawMemoryFromBeforeInstallationIsFreedUncounted) {
  // oneDNN frees through whatever CPU allocator is installed when it frees.
  void* early = c10::GetCPUAllocator()->raw_allocate(4096);
  CountingAllocatorGuard guard;
  const int64_t base = guard.allocator().currentBytes();
  const int64_t frees = guard.allocator().frees();
  c10::GetCPUAllocator()->raw_deallocate(early);
  EXPECT_EQ(guard.allocator().currentBytes(), base);
  EXPECT_EQ(guard.allocator().frees(), frees);
}

TEST(CountingAllocator, ConvolutionRunsUnderTheGuard) {
  // mkldnn convolutions allocate their buffers through the raw interface.
  auto weight = torch::randn({8, 3, 3, 3}, torch::requires_grad());
  auto x = torch::randn({2, 3, 16, 16});
  torch::conv2d(x, weight).sum().backward();  // before: buffers that oneDNN may cache
  CountingAllocatorGuard guard;
  const int64_t base = guard.allocator().resetPeak();
  auto y = torch::conv2d(x, weight);
  EXPECT_GE(guard.allocator().currentBytes() - base, 2 * 8 * 14 * 14 * kFloat);
  y.sum().backward();
}

TEST(CountingAllocator, CountsWholeBlocksWhenSetAndFreesWhatItCounted) {
  CountingAllocatorGuard guard;
  CountingAllocator& counting = guard.allocator();
  const int64_t base = counting.resetPeak();
  auto before = torch::empty({7}, torch::kByte);  // counted exactly, freed after the change
  counting.setBlockBytes(512);
  {
    auto small = torch::empty({7}, torch::kByte);
    auto large = torch::empty({1000}, torch::kFloat);
    EXPECT_EQ(counting.currentBytes() - base, 7 + 512 + 4096);
    EXPECT_EQ(counting.countedBytes(512), 512);
    EXPECT_EQ(counting.countedBytes(513), 1024);
  }
  EXPECT_EQ(counting.currentBytes() - base, 7);
  counting.setBlockBytes(1);
  before.reset();
  EXPECT_EQ(counting.currentBytes(), base);
  EXPECT_THROW(counting.setBlockBytes(0), c10::Error);
}

TEST(MemoryProbe, AllocatedBytesCountAsEachDevicesProbeDoes) {
  EXPECT_EQ(allocatedBytes(c10::Device(c10::kCPU), 7), 7);
  EXPECT_EQ(allocatedBytes(c10::Device(c10::kCUDA, 0), 7), 512);
  EXPECT_EQ(allocatedBytes(c10::Device(c10::kCUDA, 0), 4097), 4608);
  EXPECT_EQ(allocatedBytes(c10::Device(c10::kCUDA, 0), 0), 0);
  CountingAllocator::instance().setBlockBytes(512);
  EXPECT_EQ(allocatedBytes(c10::Device(c10::kCPU), 7), 512);
  CountingAllocator::instance().setBlockBytes(1);
}

TEST(MemoryProbe, CpuProbeMeasuresAutogradSavedTensors) {
  auto probe = makeMemoryProbe(c10::Device(c10::kCPU));
  auto w = torch::ones({64, 64}, torch::requires_grad());
  auto x = torch::ones({16, 64});
  const int64_t base = probe->resetPeak();
  auto h = torch::mm(x, w);
  auto y = torch::sin(h);  // sin saves its input h
  h = torch::Tensor();
  EXPECT_EQ(probe->currentBytes() - base, 2 * 16 * 64 * kFloat);  // h (saved) and y
  y = torch::Tensor();                                            // drops the graph and h
  EXPECT_EQ(probe->currentBytes(), base);
  EXPECT_EQ(probe->peakBytes() - base, 2 * 16 * 64 * kFloat);
}

TEST(Median, OddEvenAndUnsorted) {
  EXPECT_DOUBLE_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(median({5.0}), 5.0);
  EXPECT_THROW(median({}), c10::Error);
}

}  // namespace
}  // namespace jitckpt::probes
