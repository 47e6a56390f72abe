// RngState (see rng_state.h).
#include "runtime/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <mutex>

namespace jitckpt {
namespace {

at::Generator generatorOf(const c10::Device& device) {
  if (device.is_cpu()) return at::detail::getDefaultCPUGenerator();
  return at::globalContext().defaultGenerator(device);
}

at::Tensor stateOf(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void setStateOf(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace

RngState RngState::capture(const std::vector<c10::Device>& devices) {
  RngState state;
  state.cpu_ = stateOf(at::detail::getDefaultCPUGenerator());
  for (const c10::Device& d : devices) {
    if (d.is_cpu()) continue;
    state.devices_.push_back(d);
    state.device_states_.push_back(stateOf(generatorOf(d)));
  }
  return state;
}

void RngState::restore() const {
  if (cpu_.defined()) setStateOf(at::detail::getDefaultCPUGenerator(), cpu_);
  for (size_t i = 0; i < devices_.size(); ++i)
    setStateOf(generatorOf(devices_[i]), device_states_[i]);
}

}  // namespace jitckpt
