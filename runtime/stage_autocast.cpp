// Stage runs under torch.autocast (see stage_autocast.h).
#include "runtime/stage_autocast.h"

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <unordered_map>

namespace jitckpt {

AutocastScope::AutocastScope(const AutocastState& call, Casts casts)
    : saved_(AutocastState::current()) {
  AutocastState stage = call;
  stage.cache = casts == Casts::CachedForTheStage || (casts == Casts::AsTheCaller && call.cache);
  clears_ = stage.cache && (call.cpu || call.cuda);
  active_ = !stage.sameCasts(saved_) || stage.cache != saved_.cache;
  if (active_) stage.makeCurrent();
}

AutocastScope::~AutocastScope() {
  if (clears_) at::autocast::clear_cache();
  if (active_) saved_.makeCurrent();
}

std::optional<c10::DeviceType> autocastDevice(const ChainArguments& arguments,
                                              const AutocastState& call) {
  const auto device = chainDevice(arguments);
  if (device && ((device->is_cpu() && call.cpu) || (device->is_cuda() && call.cuda)))
    return device->type();
  return std::nullopt;
}

void castWeightsAsRecording(const ChainStages& stages, int l, const torch::jit::Stack& stack,
                            size_t first_lifted, const AutocastState& call,
                            c10::DeviceType device) {
  const c10::ScalarType dtype = device == c10::DeviceType::CPU ? call.cpu_dtype : call.cuda_dtype;
  c10::AutoGradMode recording(true);
  for (size_t j : stages.castLifted(l)) {
    const c10::IValue& v = stack.at(first_lifted + j);
    if (!v.isTensor()) continue;
    const at::Tensor& weight = v.toTensor();
    // What autocast caches: float32 leaves that require grad, not views.
    if (weight.defined() && weight.requires_grad() && weight.is_leaf() && !weight.is_view() &&
        weight.scalar_type() == at::kFloat)
      at::autocast::cached_cast(dtype, weight, device);
  }
}

// Under autocast the unmodified model casts a weight once per autocast region and sums the
// gradients of its uses in the autocast dtype; the stages keep autocast's cache to themselves
// (AutocastScope), so a weight that several stages cast, and that the call did not cast once for
// them (chain_op.cpp), gets those parts summed in float32.
void warnOfWeightsCastBySeveralStages(const ChainStages& stages, const ChainArguments& arguments,
                                      const std::vector<size_t>& first_positions) {
  std::unordered_map<size_t, int> first_stage;  // first position -> the first stage casting it
  for (int l = 1; l <= stages.size(); ++l) {
    for (size_t j : stages.castLifted(l)) {
      const size_t k = stages.stage(l).lifted[j];
      const at::Tensor& weight = arguments.lifted_tensors.at(stages.position(k));
      if (weight.defined() && !weight.is_leaf()) continue;  // cast once for the chain already
      const auto [it, inserted] = first_stage.emplace(first_positions[stages.position(k)], l);
      if (inserted || it->second == l) continue;
      if (!stages.firstCastWarning()) return;
      TORCH_WARN("jitckpt: under autocast, stages ", it->second, " and ", l, " both cast '",
                 stages.lifted()[k].name,
                 "' to the autocast dtype, each for itself (autocast's cache of casts is "
                 "kept to one stage, so that casts do not pile up over the forward): its "
                 "gradient sums their parts in float32 where the unmodified model sums them "
                 "in the autocast dtype, and differs from it in the last bits");
      return;
    }
  }
}

std::vector<at::Tensor> castSharedWeights(const ChainStages& stages, at::TensorList lifted) {
  std::vector<at::Tensor> out = lifted.vec();
  const AutocastState call = AutocastState::current();
  if (!(call.cpu || call.cuda) || !call.cache) return out;
  const std::vector<size_t> first = firstPositions(out);
  c10::AutoGradMode recording(true);  // as a training call casts them, planning too
  for (size_t k = 0; k < stages.lifted().size(); ++k) {
    if (!stages.castWhereverRead(k)) continue;
    const size_t position = stages.position(k);
    const at::Tensor& weight = out[position];
    if (!weight.defined() || !weight.requires_grad() || !weight.is_leaf() || weight.is_view() ||
        weight.scalar_type() != at::kFloat ||
        std::count(first.begin(), first.end(), first[position]) > 1)
      continue;
    const bool on = weight.is_cpu() ? call.cpu : weight.is_cuda() && call.cuda;
    // Through autocast's cache: a cast made before the chain (a projection of a table of positions
    // there) is the one the model's stages use too.
    if (on)
      out[position] =
          weight.is_cpu()
              ? at::autocast::cached_cast(call.cpu_dtype, weight, c10::DeviceType::CPU)
              : at::autocast::cached_cast(call.cuda_dtype, weight, c10::DeviceType::CUDA);
  }
  return out;
}

}  // namespace jitckpt
