// CUDA memory and time probes, compiled only when JITCKPT_CUDA is defined (LibTorch with CUDA).
// Memory: the caching allocator's allocated bytes (stat type AGGREGATE) current and peak of one
// device, with resetPeakStats. Time: CUDA events on the current stream.
#pragma once

#ifdef JITCKPT_CUDA

#include <memory>

#include "runtime/probes/memory_probe.h"
#include "runtime/probes/stopwatch.h"

namespace jitckpt::probes {

std::unique_ptr<MemoryProbe> makeCudaMemoryProbe(c10::Device device);
std::unique_ptr<Stopwatch> makeCudaStopwatch(c10::Device device);
void synchronizeCuda(c10::Device device);
// Free bytes of the device (cudaMemGetInfo) plus the caching allocator's reserved, unallocated
// bytes.
int64_t cudaAvailableBytes(c10::Device device);

}  // namespace jitckpt::probes

#endif  // JITCKPT_CUDA
