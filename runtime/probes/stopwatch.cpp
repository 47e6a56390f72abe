// The CPU stopwatch, the factory that picks the stopwatch for a device, and median (see
// stopwatch.h).
#include "runtime/probes/stopwatch.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>

#include "runtime/probes/cuda_probe.h"
#include "runtime/probes/memory_probe.h"

namespace jitckpt::probes {
namespace {

class CpuStopwatch final : public Stopwatch {
 public:
  void start() override { start_ = std::chrono::steady_clock::now(); }
  double stopSeconds() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

std::unique_ptr<Stopwatch> makeStopwatch(c10::Device device) {
  if (device.is_cpu()) return std::make_unique<CpuStopwatch>();
#ifdef JITCKPT_CUDA
  if (device.is_cuda()) return makeCudaStopwatch(device);
#endif
  failUnmeasurable(device);
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
