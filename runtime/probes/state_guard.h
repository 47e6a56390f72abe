// RngStateGuard: saves the default random generators that a device's ops draw from (the CPU
// generator always, the CUDA generator of the device when it is CUDA) and restores them when it
// goes out of scope, so that measuring stages that call dropout leaves the random stream as it
// was. Takes a c10::Device.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace jitckpt::probes {

class RngStateGuard {
 public:
  explicit RngStateGuard(c10::Device device);
  ~RngStateGuard();
  RngStateGuard(const RngStateGuard&) = delete;
  RngStateGuard& operator=(const RngStateGuard&) = delete;

 private:
  c10::Device device_;
  at::Tensor cpu_state_;
  at::Tensor cuda_state_;  // undefined unless device_ is CUDA (and jitckpt has CUDA)
};

}  // namespace jitckpt::probes
