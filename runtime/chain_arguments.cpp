// Chain arguments: the chain's device, the first position of each lifted tensor, and the key a
// plan is made for (see chain_arguments.h).
#include "runtime/chain_arguments.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <utility>

#include "runtime/compat.h"

namespace jitckpt {

namespace {

std::string typeOf(const at::Tensor& t) {
  return t.defined() ? std::string(c10::toString(t.scalar_type())) + "@" + t.device().str()
                     : "none";
}

}  // namespace

std::optional<c10::Device> chainDevice(const ChainArguments& arguments) {
  std::optional<c10::Device> device;
  for (const auto* tensors : {&arguments.inputs, &arguments.lifted_tensors}) {
    for (const auto& t : *tensors) {
      if (t.defined() && !t.is_cpu()) return t.device();
      if (t.defined()) device = t.device();
    }
  }
  return device;
}

std::vector<size_t> firstPositions(const Tensors& lifted) {
  std::vector<size_t> first(lifted.size());
  std::unordered_map<const c10::TensorImpl*, size_t> seen;
  seen.reserve(lifted.size());
  for (size_t position = 0; position < lifted.size(); ++position) {
    const at::Tensor& t = lifted[position];
    first[position] =
        t.defined() ? seen.emplace(t.unsafeGetTensorImpl(), position).first->second : position;
  }
  return first;
}

Tensors heldFromStart(const ChainStages& stages, const ChainArguments& arguments) {
  Tensors held = arguments.inputs;
  for (size_t k = 0; k < stages.lifted().size(); ++k) {
    const size_t position = stages.position(k);
    const LiftedKind kind = stages.lifted()[k].kind;
    if (kind == LiftedKind::Side && position < arguments.lifted_tensors.size()) {
      held.push_back(arguments.lifted_tensors[position]);
    } else if (kind == LiftedKind::Scalar && position < arguments.lifted_scalars.size() &&
               arguments.lifted_scalars[position].isTensor()) {
      held.push_back(arguments.lifted_scalars[position].toTensor());
    }
  }
  return held;
}

Tensors castWeights(const ChainStages& stages, const ChainArguments& arguments) {
  Tensors casts;
  for (size_t k = 0; k < stages.lifted().size(); ++k) {
    const size_t position = stages.position(k);
    if (stages.lifted()[k].kind != LiftedKind::Parameter ||
        position >= arguments.lifted_tensors.size())
      continue;
    const at::Tensor& t = arguments.lifted_tensors[position];
    if (t.defined() && !t.is_leaf()) casts.push_back(t);
  }
  return casts;
}

namespace {

// Which parameters of a list are frozen: their count and an FNV-1a hash of their positions.
class FrozenSet {
 public:
  void add(size_t position, const at::Tensor& parameter) {
    ++total_;
    if (parameter.requires_grad()) return;
    ++frozen_;
    hash_ = (hash_ ^ position) * 1099511628211ull;
  }
  // "k of n <what> frozen (set ...)"; empty where none is.
  std::string str(const std::string& what) const {
    if (frozen_ == 0) return "";
    char set[20];
    std::snprintf(set, sizeof set, "%016llx", static_cast<unsigned long long>(hash_));
    return std::to_string(frozen_) + " of " + std::to_string(total_) + " " + what +
           " frozen (set " + set + ")";
  }

 private:
  size_t total_ = 0, frozen_ = 0;
  uint64_t hash_ = 14695981039346656037ull;
};

}  // namespace

int64_t requiredGradientBytes(const Tensors& parameters) {
  int64_t bytes = 0;
  for (const at::Tensor& p : parameters) {
    if (p.defined() && p.requires_grad())
      bytes += static_cast<int64_t>(p.numel()) * static_cast<int64_t>(p.element_size());
  }
  return bytes;
}

InputKey inputKey(const ChainStages& stages, const ChainArguments& arguments,
                  const OutsideParameters& outside) {
  InputKey key;
  // Which tensors take gradients is part of the key: it decides what backward holds (an input's
  // gradient, the parameters'), so a layer unfrozen after planning, or an input that now requires
  // grad, gets a plan of its own.
  auto add = [&](const at::Tensor& t) {
    key.shapes.push_back(t.defined() ? t.sizes().vec() : std::vector<int64_t>{});
    key.types.push_back(typeOf(t) + (t.defined() && t.requires_grad() ? " requiring grad" : ""));
  };
  FrozenSet frozen;
  for (const auto& t : arguments.inputs) add(t);
  std::vector<std::string> parameter_types;
  std::vector<std::pair<at::ScalarType, c10::Device>> parameter_kinds;
  for (size_t k = 0; k < stages.lifted().size(); ++k) {
    const size_t position = stages.position(k);
    const LiftedKind kind = stages.lifted()[k].kind;
    if (kind == LiftedKind::Side && position < arguments.lifted_tensors.size()) {
      add(arguments.lifted_tensors[position]);
    } else if (kind == LiftedKind::Scalar && position < arguments.lifted_scalars.size() &&
               arguments.lifted_scalars[position].isTensor()) {
      add(arguments.lifted_scalars[position].toTensor());
    } else if (kind != LiftedKind::Scalar && position < arguments.lifted_tensors.size() &&
               arguments.lifted_tensors[position].defined()) {
      const at::Tensor& t = arguments.lifted_tensors[position];
      if (kind == LiftedKind::Parameter) frozen.add(k, t);
      // Named once per (dtype, device): thousands of parameters share a few.
      if (std::none_of(parameter_kinds.begin(), parameter_kinds.end(), [&](const auto& seen) {
            return seen.first == t.scalar_type() && seen.second == t.device();
          })) {
        parameter_kinds.emplace_back(t.scalar_type(), t.device());
        parameter_types.push_back(typeOf(t));
      }
    }
  }
  std::sort(parameter_types.begin(), parameter_types.end());
  std::string described = "parameters and buffers:";
  for (const auto& type : parameter_types) described += " " + type;
  if (const std::string text = frozen.str("parameters"); !text.empty()) described += ", " + text;
  // Under autocast the stages hold other tensors (casts, activations in another dtype).
  const AutocastState autocast = AutocastState::current();
  if (const auto device = chainDevice(arguments)) {
    if (device->is_cpu() && autocast.cpu) {
      described += ", under autocast to " + std::string(c10::toString(autocast.cpu_dtype));
    } else if (device->is_cuda() && autocast.cuda) {
      described += ", under autocast to " + std::string(c10::toString(autocast.cuda_dtype));
    }
  }
  key.types.push_back(described);
  FrozenSet frozen_outside;
  size_t position = 0;
  for (const Tensors* list : {&outside.before, &outside.after}) {
    for (const at::Tensor& p : *list) frozen_outside.add(position++, p);
  }
  key.outside = frozen_outside.str("parameters outside the chain");
  return key;
}

}  // namespace jitckpt
