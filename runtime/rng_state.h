// Random generator state: takes the devices a chain runs on; captures the default generators their
// random ops draw from (the CPU's always, and each accelerator's) and puts them back. The stage
// runner replays a stage's first state when it recomputes it; RngStateGuard leaves the random
// stream as it was around a measurement.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

#include <vector>

namespace jitckpt {

class RngState {
 public:
  RngState() = default;
  // `devices`: the non-CPU devices in use (CPU's generator is always included).
  static RngState capture(const std::vector<c10::Device>& devices);
  void restore() const;

 private:
  // Clones of the generators, not their serialized states: the CPU's is a 5 KB tensor, which a
  // chain of small stages would hold once per random stage as activation memory.
  std::vector<c10::Device> devices_;   // the CPU's first
  std::vector<at::Generator> clones_;  // parallel to devices_
  // Whether cuDNN's RNN dropout state was due to be seeded again (rng_state.cpp), per device.
  std::vector<bool> rnn_reseeds_;
};

class RngStateGuard {
 public:
  explicit RngStateGuard(const std::vector<c10::Device>& devices)
      : saved_(RngState::capture(devices)) {}
  ~RngStateGuard() { saved_.restore(); }
  RngStateGuard(const RngStateGuard&) = delete;
  RngStateGuard& operator=(const RngStateGuard&) = delete;

 private:
  RngState saved_;
};

}  // namespace jitckpt
