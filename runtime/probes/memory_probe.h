// Memory and time probes for one device: live bytes and peak of the device's allocator, and a
// stopwatch. Takes a c10::Device; returns the probe that fits it: the counting CPU allocator on
// the CPU, the CUDA caching allocator's allocated-bytes statistics and CUDA events on CUDA
// (compiled only when JITCKPT_CUDA is defined, i.e. when LibTorch has CUDA).
#pragma once

#include <c10/core/Device.h>

#include <chrono>
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

// On the CPU the probe installs the counting allocator for its own lifetime (see
// counting_allocator.h): create it before the tensors whose frees it must see. Throws for CUDA
// when jitckpt was built without CUDA, and for any other device type.
std::unique_ptr<MemoryProbe> makeMemoryProbe(c10::Device device);

// Measures the duration of device work: wall time on the CPU; on CUDA two events recorded on the
// current stream around the work, and stop() waits for the second one.
class Stopwatch {
 public:
  virtual ~Stopwatch() = default;
  virtual void start() = 0;
  virtual double stopSeconds() = 0;  // seconds since start()
};

std::unique_ptr<Stopwatch> makeStopwatch(c10::Device device);

// Waits until the device has finished the work queued so far (nothing to do on the CPU).
void synchronize(c10::Device device);

// Median of a non-empty sample (mean of the two middle values for even sizes).
double median(std::vector<double> values);

}  // namespace jitckpt::probes
