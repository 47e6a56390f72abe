// CUDA probes (see cuda_probe.h): caching-allocator statistics and CUDA events. Compiled only
// with JITCKPT_CUDA. The statistics API differs between LibTorch lines: 1.13 takes an int device
// and returns CUDACachingAllocator::DeviceStats; 2.x takes a c10::DeviceIndex and returns
// c10::CachingDeviceAllocator::DeviceStats. Both are used through `auto` below.
#ifdef JITCKPT_CUDA

#include "runtime/probes/cuda_probe.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

namespace jitckpt::probes {
namespace {

// Index 0 of the stat arrays is StatType::AGGREGATE (all pools) in every LibTorch line; the enum
// moved namespaces in 2.x, the index did not.
constexpr size_t kAggregate = 0;

c10::DeviceIndex resolveIndex(c10::Device device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}

struct AllocatedBytes {
  int64_t current;
  int64_t peak;
};

AllocatedBytes allocatedBytes(c10::DeviceIndex index) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  return {static_cast<int64_t>(stats.allocated_bytes[kAggregate].current),
          static_cast<int64_t>(stats.allocated_bytes[kAggregate].peak)};
}

class CudaMemoryProbe final : public MemoryProbe {
 public:
  explicit CudaMemoryProbe(c10::Device device) : index_(resolveIndex(device)) {
    // PyTorch initializes CUDA lazily; before its first CUDA tensor (2.x) the caching allocator
    // knows no device and its statistics calls refuse the index. A tensor of one element starts it.
    (void)at::empty({1}, at::TensorOptions().device(c10::kCUDA, index_));
  }
  c10::Device device() const override { return c10::Device(c10::kCUDA, index_); }
  int64_t currentBytes() override { return allocatedBytes(index_).current; }
  int64_t peakBytes() override { return allocatedBytes(index_).peak; }
  int64_t resetPeak() override {
    // The caching allocator frees blocks on the host side when the tensor dies, so no device
    // synchronization is needed for the counts.
    c10::cuda::CUDACachingAllocator::resetPeakStats(index_);
    return allocatedBytes(index_).current;
  }

 private:
  c10::DeviceIndex index_;
};

class CudaStopwatch final : public Stopwatch {
 public:
  explicit CudaStopwatch(c10::Device device)
      : index_(resolveIndex(device)), start_(cudaEventDefault), end_(cudaEventDefault) {}
  void start() override {
    c10::cuda::CUDAGuard guard(index_);
    start_.record();
  }
  double stopSeconds() override {
    c10::cuda::CUDAGuard guard(index_);
    end_.record();
    end_.synchronize();
    return static_cast<double>(start_.elapsed_time(end_)) / 1000.0;
  }

 private:
  c10::DeviceIndex index_;
  at::cuda::CUDAEvent start_;  // timing enabled: CUDAEvent's default flags disable it
  at::cuda::CUDAEvent end_;
};

}  // namespace

std::unique_ptr<MemoryProbe> makeCudaMemoryProbe(c10::Device device) {
  return std::make_unique<CudaMemoryProbe>(device);
}

std::unique_ptr<Stopwatch> makeCudaStopwatch(c10::Device device) {
  return std::make_unique<CudaStopwatch>(device);
}

int64_t cudaAvailableBytes(c10::Device device) {
  const c10::DeviceIndex index = resolveIndex(device);
  c10::cuda::CUDAGuard guard(index);
  size_t free_bytes = 0, total_bytes = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  const int64_t cached = static_cast<int64_t>(stats.reserved_bytes[kAggregate].current) -
                         static_cast<int64_t>(stats.allocated_bytes[kAggregate].current);
  return static_cast<int64_t>(free_bytes) + cached;
}

void synchronizeCuda(c10::Device device) {
  c10::cuda::CUDAGuard guard(resolveIndex(device));
  C10_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace jitckpt::probes

#endif  // JITCKPT_CUDA
