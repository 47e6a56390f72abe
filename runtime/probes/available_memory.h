// Memory a device can still give to tensors, for the "auto" memory limit. Takes a c10::Device;
// returns bytes: on the CPU the kernel's estimate of available RAM (MemAvailable in
// /proc/meminfo), on CUDA the driver's free bytes plus what the caching allocator has reserved
// but not allocated (it hands those out first). Tests replace the figure with an injected one.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace jitckpt::probes {

// Throws (TORCH_CHECK) for a device it cannot read.
int64_t availableMemory(c10::Device device);

// Tests only: availableMemory returns `bytes` for every device from now on; -1 measures again.
void setAvailableMemoryForTesting(int64_t bytes);

}  // namespace jitckpt::probes
