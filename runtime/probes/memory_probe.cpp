// CPU probes and the factories that pick the probe for a device (see memory_probe.h).
#include "runtime/probes/memory_probe.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "runtime/probes/counting_allocator.h"
#include "runtime/probes/cuda_probe.h"

namespace jitckpt::probes {
namespace {

class CpuMemoryProbe final : public MemoryProbe {
 public:
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  int64_t currentBytes() override { return guard_.allocator().currentBytes(); }
  int64_t peakBytes() override { return guard_.allocator().peakBytes(); }
  int64_t resetPeak() override { return guard_.allocator().resetPeak(); }

 private:
  CountingAllocatorGuard guard_;
};

class CpuStopwatch final : public Stopwatch {
 public:
  void start() override { start_ = std::chrono::steady_clock::now(); }
  double stopSeconds() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

[[noreturn]] void unsupported(c10::Device device) {
#ifndef JITCKPT_CUDA
  TORCH_CHECK(!device.is_cuda(), "jitckpt was built without CUDA (its LibTorch has none), so ",
              "it cannot measure ", device, ": rebuild against a LibTorch with CUDA, or profile ",
              "on the CPU");
#endif
  TORCH_CHECK(false, "jitckpt measures memory and time only on CPU and CUDA devices, not on ",
              device);
}

}  // namespace

std::unique_ptr<MemoryProbe> makeMemoryProbe(c10::Device device) {
  if (device.is_cpu()) return std::make_unique<CpuMemoryProbe>();
#ifdef JITCKPT_CUDA
  if (device.is_cuda()) return makeCudaMemoryProbe(device);
#endif
  unsupported(device);
}

std::unique_ptr<Stopwatch> makeStopwatch(c10::Device device) {
  if (device.is_cpu()) return std::make_unique<CpuStopwatch>();
#ifdef JITCKPT_CUDA
  if (device.is_cuda()) return makeCudaStopwatch(device);
#endif
  unsupported(device);
}

void synchronize(c10::Device device) {
#ifdef JITCKPT_CUDA
  if (device.is_cuda()) synchronizeCuda(device);
#else
  (void)device;
#endif
}

double median(std::vector<double> values) {
  TORCH_CHECK(!values.empty(), "median of an empty sample");
  const size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + middle, values.end());
  const double upper = values[middle];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + middle);
  return (lower + upper) / 2;
}

}  // namespace jitckpt::probes
