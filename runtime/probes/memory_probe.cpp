// The CPU memory probe and the factory that picks the probe for a device (see memory_probe.h).
#include "runtime/probes/memory_probe.h"

#include <c10/util/Exception.h>

#include <unordered_set>

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

}  // namespace

int64_t allocatedBytes(c10::Device device, int64_t nbytes) {
  if (nbytes <= 0) return 0;
  if (device.is_cpu()) return CountingAllocator::instance().countedBytes(nbytes);
  if (!device.is_cuda()) return nbytes;
  constexpr int64_t kCudaBlockBytes = 512;  // the caching allocator's kMinBlockSize
  return (nbytes + kCudaBlockBytes - 1) / kCudaBlockBytes * kCudaBlockBytes;
}

int64_t storageBytes(const std::vector<at::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second)
      bytes += allocatedBytes(t.storage().device(), static_cast<int64_t>(t.storage().nbytes()));
  }
  return bytes;
}

[[noreturn]] void failUnmeasurable(c10::Device device) {
#ifndef JITCKPT_CUDA
  TORCH_CHECK(!device.is_cuda(), "jitckpt was built without CUDA (its LibTorch has none), so ",
              "it cannot measure ", device, ": rebuild against a LibTorch with CUDA, or profile ",
              "on the CPU");
#endif
  TORCH_CHECK(false, "jitckpt measures memory and time only on CPU and CUDA devices, not on ",
              device);
}

std::unique_ptr<MemoryProbe> makeMemoryProbe(c10::Device device) {
  if (device.is_cpu()) return std::make_unique<CpuMemoryProbe>();
#ifdef JITCKPT_CUDA
  if (device.is_cuda()) return makeCudaMemoryProbe(device);
#endif
  failUnmeasurable(device);
}

}  // namespace jitckpt::probes
