// Available device memory (see available_memory.h).
#include "runtime/probes/available_memory.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/probes/cuda_probe.h"
#include "runtime/probes/memory_probe.h"

namespace jitckpt::probes {
namespace {

std::atomic<int64_t> injected{-1};

int64_t cpuAvailableBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string name;
    int64_t kib = 0;
    if (fields >> name >> kib && name == "MemAvailable:") return kib * 1024;
  }
  TORCH_CHECK(false, "jitckpt: memory_limit \"auto\" reads the available RAM from /proc/meminfo, ",
              "which this system lacks; give the limit in bytes instead");
}

}  // namespace

int64_t availableMemory(c10::Device device) {
  if (const int64_t bytes = injected.load(); bytes >= 0) return bytes;
  if (device.is_cpu()) return cpuAvailableBytes();
#ifdef JITCKPT_CUDA
  if (device.is_cuda()) return cudaAvailableBytes(device);
#endif
  failUnmeasurable(device);
}

void setAvailableMemoryForTesting(int64_t bytes) { injected.store(bytes); }

}  // namespace jitckpt::probes
