// Timing on one device: a stopwatch (wall time on the CPU; CUDA events on the current stream,
// compiled only with JITCKPT_CUDA), device synchronization, and the median that the profiler
// keeps of repeated timings.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <vector>

namespace jitckpt::probes {

class Stopwatch {
 public:
  virtual ~Stopwatch() = default;
  virtual void start() = 0;
  virtual double stopSeconds() = 0;  // seconds since start(); on CUDA waits for the work
};

std::unique_ptr<Stopwatch> makeStopwatch(c10::Device device);

// Waits until the device has finished the work queued so far (nothing to do on the CPU).
void synchronize(c10::Device device);

// Median of a non-empty sample (mean of the two middle values for even sizes).
double median(std::vector<double> values);

}  // namespace jitckpt::probes
