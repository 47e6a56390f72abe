// Plan::forInputs: re-planning for chain input shapes other than the planned ones. Any schedule
// computes the right gradients whatever the shapes; only its memory depends on them, so a new
// shape is profiled and solved again at the same limit instead of trusting the old schedule.
#include "passes/checkpoint.h"
#include "passes/profile.h"
#include "passes/solver/memory_size.h"
#include "runtime/plan.h"

namespace jitckpt {

c10::intrusive_ptr<Plan> Plan::forInputs(const std::vector<at::Tensor>& inputs,
                                         const std::vector<at::Tensor>& lifted_tensors,
                                         const std::vector<c10::IValue>& lifted_scalars) const {
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& t : inputs) shapes.push_back(t.sizes().vec());
  if (input_shapes.empty() || shapes == input_shapes) return c10::intrusive_ptr<Plan>::reclaim_copy(const_cast<Plan*>(this));
  std::lock_guard<std::mutex> lock(replans_mutex_);
  auto found = replans_.find(shapes);
  if (found != replans_.end()) return found->second;

  auto describe = [](const std::vector<std::vector<int64_t>>& s) {
    std::string text;
    for (const auto& shape : s) text += (text.empty() ? "" : ", ") + c10::str(c10::IntArrayRef(shape));
    return text;
  };
  TORCH_WARN("jitckpt: chain input shapes [", describe(shapes), "] differ from the planned [", describe(input_shapes),
             "]: profiling and solving again for them at the same limit (once per new shape)");
  auto plan = c10::make_intrusive<Plan>();
  plan->stages = stages;
  plan->lifted_names = lifted_names;
  plan->lifted_kinds = lifted_kinds;
  plan->lifted_position = lifted_position;
  plan->slots = slots;
  plan->input_shapes = shapes;
  ProfileOptions options;
  options.progress = [](int, int) {};
  options.measure_unconstrained_peak = false;
  plan->costs = profileStages(*plan, ChainArguments{inputs, lifted_tensors, lifted_scalars}, options).costs;
  const Strategy strategy = parseStrategy(this->strategy);
  try {
    solvePlan(*plan, strategy == Strategy::None ? MemoryLimit::unlimited() : MemoryLimit::bytes(memory_limit),
              strategy);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "jitckpt: the plan's memory limit cannot hold the new input shapes [", describe(shapes),
                "]: ", e.what_without_backtrace(), ". Re-run jitckpt.checkpoint with these shapes and a larger limit");
  }
  replans_[shapes] = plan;
  return plan;
}

}  // namespace jitckpt
