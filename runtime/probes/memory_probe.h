// Memory probe for one device: live bytes and peak of the device's allocator. Takes a c10::Device;
// returns the probe that fits it: the counting CPU allocator on the CPU, the CUDA caching
// allocator's allocated-bytes statistics on CUDA (compiled only when JITCKPT_CUDA is defined, i.e.
// when LibTorch has CUDA).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace jitckpt::probes {

// Bytes of live tensor memory on one device, and its peak since the last resetPeak. Both are
// allocator-level figures: requested bytes on the CPU, the caching allocator's allocated bytes
// (rounded to its 512-byte blocks) on CUDA, never the memory the allocator merely caches.
class MemoryProbe {
 public:
  virtual ~MemoryProbe() = default;
  virtual c10::Device device() const = 0;
  virtual int64_t currentBytes() = 0;
  virtual int64_t peakBytes() = 0;
  // Sets the peak to the current live bytes and returns them: the baseline of a measurement.
  virtual int64_t resetPeak() = 0;
};

// The bytes that the allocator of `device` counts for a storage of `nbytes`, as its probe measures
// them: the counting allocator's on the CPU, whole 512-byte blocks on CUDA. Sizes the profile
// reads off tensors rather than measures (outputs, gradients) go through it, so that they add up
// with what the probe measured; else each small tensor is a block short on CUDA.
int64_t allocatedBytes(c10::Device device, int64_t nbytes);

// allocatedBytes of the distinct storages behind `tensors` (undefined ones and those without
// storage count nothing): what the profile records of a stage's outputs (wa), and what a call
// compares its own with.
int64_t storageBytes(const std::vector<at::Tensor>& tensors);

// On the CPU the probe installs the counting allocator for its own lifetime (see
// counting_allocator.h): create it before the tensors whose frees it must see. Throws for CUDA
// when jitckpt was built without CUDA, and for any other device type.
std::unique_ptr<MemoryProbe> makeMemoryProbe(c10::Device device);

// Throws the error for a device that jitckpt cannot measure (not CPU, or CUDA without CUDA).
[[noreturn]] void failUnmeasurable(c10::Device device);

}  // namespace jitckpt::probes
