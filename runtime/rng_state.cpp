// RngState (see rng_state.h).
#include "runtime/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>

#include <mutex>

namespace jitckpt {
namespace {

at::Generator generatorOf(const c10::Device& device) {
  if (device.is_cpu()) return at::detail::getDefaultCPUGenerator();
  return at::globalContext().defaultGenerator(device);
}

at::Generator cloneOf(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.clone();
}

void setStateFrom(at::Generator generator, at::Generator saved) {
  at::Tensor state;
  {
    std::lock_guard<std::mutex> lock(saved.mutex());
    state = saved.get_state();
  }
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace

RngState RngState::capture(const std::vector<c10::Device>& devices) {
  RngState state;
  state.devices_.push_back(c10::Device(c10::kCPU));
  for (const c10::Device& d : devices) {
    if (!d.is_cpu()) state.devices_.push_back(d);
  }
  for (const c10::Device& d : state.devices_) state.clones_.push_back(cloneOf(generatorOf(d)));
  return state;
}

void RngState::restore() const {
  for (size_t i = 0; i < clones_.size(); ++i) setStateFrom(generatorOf(devices_[i]), clones_[i]);
}

}  // namespace jitckpt
