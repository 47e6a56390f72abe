// InputKey: what a plan is made for, beyond the stages: the shapes of the chain's inputs and side
// tensors, the dtype and device of each of them and of the parameters, which of them require grad
// (the parameters frozen, those read only outside the chain too), and the autocast dtype where the
// call runs under torch.autocast on the chain's device. Two calls with equal
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
  // "Float@cpu" (or "Float@cpu requiring grad") per shape, then "parameters and buffers: ...".
  std::vector<std::string> types;
  // Process-local, never saved: "k of n parameters outside the chain frozen (set ...)", where the
  // plan knows them (OutsideParameters) and some are; else empty.
  std::string outside;

  bool matches(const InputKey& planned) const {
    return shapes == planned.shapes && (planned.types.empty() || types == planned.types) &&
           outside == planned.outside;
  }
  bool operator<(const InputKey& other) const {
    return std::tie(shapes, types, outside) < std::tie(other.shapes, other.types, other.outside);
  }
  // "[4, 3, 224, 224] Float@cpu; parameters and buffers: Float@cpu Long@cpu", then ", 3 of 40
  // parameters frozen (set ...)" and ", under autocast to BFloat16" where those apply.
  std::string str() const;
};

}  // namespace jitckpt
