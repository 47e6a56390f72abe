// RngState (see rng_state.h).
#include "runtime/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>

#include <mutex>
#include <type_traits>
#include <utility>

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

// cuDNN keeps the random state of its RNN dropout apart (PyTorch's RNN.cpp, get_dropout_state)
// and seeds it again from the CUDA generator at the next recurrent layer with dropout after the
// generator's seed was set: manual_seed does, and so does set_state, which a restore calls. That
// pending re-seed is part of the state a restore puts back, or the layers after it would draw
// other masks than the model's. PyTorch 1.13 never seeds it again (no reset_rnn_state).
template <typename G, typename = void>
struct KeepsRnnReseed : std::false_type {};
template <typename G>
struct KeepsRnnReseed<G, std::void_t<decltype(std::declval<G&>().reset_rnn_state())>>
    : std::true_type {};

// Whether a re-seed is pending on CUDA generator `generator` (locked by the caller); clears it.
template <typename G>
bool takeRnnReseed(at::Generator& generator) {
  if constexpr (KeepsRnnReseed<G>::value) {
    return static_cast<G*>(generator.unsafeGetGeneratorImpl())->reset_rnn_state();
  } else {
    return false;
  }
}

void setStateFrom(at::Generator generator, at::Generator saved, bool rnn_reseed) {
  if (generator.device().is_cpu()) return copyCpuState(std::move(generator), std::move(saved));
  at::Tensor state;  // an accelerator's: a few bytes of host memory
  {
    std::lock_guard<std::mutex> lock(saved.mutex());
    state = saved.get_state();
  }
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);  // on CUDA, sets a re-seed pending
  if (generator.device().is_cuda() && !rnn_reseed) takeRnnReseed<at::CUDAGeneratorImpl>(generator);
}

// Whether a re-seed is pending on `generator`, left as it was.
bool pendingRnnReseed(at::Generator generator) {
  if (!generator.device().is_cuda()) return false;
  std::lock_guard<std::mutex> lock(generator.mutex());
  const bool pending = takeRnnReseed<at::CUDAGeneratorImpl>(generator);
  if (pending) generator.set_state(generator.get_state());  // pending again; seed and offset kept
  return pending;
}

}  // namespace

RngState RngState::capture(const std::vector<c10::Device>& devices) {
  RngState state;
  state.devices_.push_back(c10::Device(c10::kCPU));
  for (const c10::Device& d : devices) {
    if (!d.is_cpu()) state.devices_.push_back(d);
  }
  for (const c10::Device& d : state.devices_) {
    state.clones_.push_back(cloneOf(generatorOf(d)));
    state.rnn_reseeds_.push_back(pendingRnnReseed(generatorOf(d)));
  }
  return state;
}

void RngState::restore() const {
  for (size_t i = 0; i < clones_.size(); ++i)
    setStateFrom(generatorOf(devices_[i]), clones_[i], rnn_reseeds_[i]);
}

}  // namespace jitckpt
