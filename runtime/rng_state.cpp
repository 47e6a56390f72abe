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

// The CPU generator's state is copied field by field: get_state() would allocate a 5 KB tensor,
// a transient the plan does not count (at the end of a group of stages, with all of it held).
void copyCpuState(at::Generator generator, at::Generator saved) {
  std::lock_guard<std::mutex> saved_lock(saved.mutex());
  auto* from = at::check_generator<at::CPUGeneratorImpl>(saved);
  std::lock_guard<std::mutex> lock(generator.mutex());
  auto* to = at::check_generator<at::CPUGeneratorImpl>(generator);
  to->set_engine(from->engine());
  to->set_next_float_normal_sample(from->next_float_normal_sample());
  to->set_next_double_normal_sample(from->next_double_normal_sample());
}

void setStateFrom(at::Generator generator, at::Generator saved) {
  if (generator.device().is_cpu()) return copyCpuState(std::move(generator), std::move(saved));
  at::Tensor state;  // an accelerator's: a few bytes of host memory
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
