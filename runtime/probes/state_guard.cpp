// RngStateGuard (see state_guard.h).
#include "runtime/probes/state_guard.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#ifdef JITCKPT_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace jitckpt::probes {
namespace {

at::Tensor getState(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void setState(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

#ifdef JITCKPT_CUDA
at::Generator cudaGenerator(c10::Device device) {
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  return at::cuda::detail::getDefaultCUDAGenerator(index);
}
#endif

}  // namespace

RngStateGuard::RngStateGuard(c10::Device device) : device_(device) {
  cpu_state_ = getState(at::detail::getDefaultCPUGenerator());
#ifdef JITCKPT_CUDA
  if (device_.is_cuda()) cuda_state_ = getState(cudaGenerator(device_));
#endif
}

RngStateGuard::~RngStateGuard() {
  setState(at::detail::getDefaultCPUGenerator(), cpu_state_);
#ifdef JITCKPT_CUDA
  if (cuda_state_.defined()) setState(cudaGenerator(device_), cuda_state_);
#endif
}

}  // namespace jitckpt::probes
