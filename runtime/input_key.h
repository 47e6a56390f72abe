// InputKey: what a plan is made for, beyond the stages: the shapes of the chain's inputs and side
// tensors, the dtype and device of each of them and of the parameters, and the autocast dtype
// where the call runs under torch.autocast on the chain's device. Two calls with equal
// keys have the same costs; any other key gets a plan of its own (see replan.h). Plans saved
// before dtypes and devices were recorded have no types and match by shapes alone.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace jitckpt {

struct InputKey {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> types;  // "Float@cpu" per shape, then "parameters and buffers: ..."

  bool matches(const InputKey& planned) const {
    return shapes == planned.shapes && (planned.types.empty() || types == planned.types);
  }
  bool operator<(const InputKey& other) const {
    return std::tie(shapes, types) < std::tie(other.shapes, other.types);
  }
  // "[4, 3, 224, 224] Float@cpu; parameters and buffers: Float@cpu Long@cpu", then ", under
  // autocast to BFloat16" where that applies.
  std::string str() const;
};

}  // namespace jitckpt
