// planForArguments and the installed Replanner (see replan.h).
#include "runtime/replan.h"

#include "runtime/executor.h"

namespace jitckpt {
namespace {

std::unique_ptr<Replanner>& installed() {
  static std::unique_ptr<Replanner> replanner;
  return replanner;
}

}  // namespace

void installReplanner(std::unique_ptr<Replanner> replanner) { installed() = std::move(replanner); }

c10::intrusive_ptr<Plan> PlanVariants::find(const InputKey& key) const {
  auto found = plans_.find(key);
  return found == plans_.end() ? c10::intrusive_ptr<Plan>() : found->second;
}

std::vector<c10::intrusive_ptr<Plan>> PlanVariants::all() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<c10::intrusive_ptr<Plan>> plans;
  for (const auto& entry : plans_) plans.push_back(entry.second);
  return plans;
}

c10::intrusive_ptr<Plan> PlanVariants::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return latest_;
}

void PlanVariants::add(const InputKey& key, c10::intrusive_ptr<Plan> plan) {
  latest_ = plan;
  plans_[key] = std::move(plan);
}

c10::intrusive_ptr<Plan> planForArguments(const c10::intrusive_ptr<Plan>& plan,
                                          const ChainArguments& arguments) {
  const InputKey key = inputKey(plan->stages(), arguments);
  const InputKey& planned = plan->solution().input_key;
  PlanVariants& variants = plan->variants();
  if (!plan->deferred() && (planned.shapes.empty() || key.matches(planned))) {
    if (!variants.replacedPlanned()) return plan;
    std::lock_guard<std::mutex> lock(variants.mutex());
    auto found = variants.find(key);
    return found ? found : plan;
  }
  std::lock_guard<std::mutex> lock(variants.mutex());
  if (auto found = variants.find(key)) return found;
  if (plan->deferred()) {
    TORCH_CHECK(installed(), "jitckpt: this module was rewritten without example inputs and ",
                "plans at its first training call, which needs the jitckpt passes library: ",
                "import jitckpt, or link libjitckpt");
  } else {
    TORCH_CHECK(installed(), "jitckpt: chain inputs [", key.str(), "] differ from the planned [",
                planned.str(),
                "] and re-planning needs the jitckpt passes library: import jitckpt, or link "
                "libjitckpt");
    TORCH_WARN("jitckpt: chain inputs [", key.str(), "] differ from the planned [", planned.str(),
               "]: profiling and solving again for them at the limit ",
               plan->solution().requested_limit.toString(),
               " (once per new shape, dtype, device or autocast dtype)");
  }
  auto variant = installed()->replan(*plan, arguments, nullptr);
  variants.add(key, variant);
  return variant;
}

c10::intrusive_ptr<Plan> planForLargerSizes(const c10::intrusive_ptr<Plan>& plan,
                                            const c10::intrusive_ptr<Plan>& active,
                                            const ChainArguments& arguments,
                                            const StageOutputsGrew& grew) {
  const InputKey key = inputKey(plan->stages(), arguments);
  TORCH_CHECK(installed(), "jitckpt: this call's data makes larger tensors than the plan's (",
              grew.what(), ") and re-planning needs the jitckpt passes library: import jitckpt, ",
              "or link libjitckpt");
  TORCH_WARN("jitckpt: ", grew.what(), " (", active->solution().input_key.str(),
             "): the data sets the sizes of this chain's tensors (a boolean mask, nonzero, "
             "unique). Profiling and solving again at the limit ",
             plan->solution().requested_limit.toString(),
             " for the larger sizes, kept with the earlier ones; this happens again only "
             "where later data makes larger tensors still. To plan once, plan with the data "
             "that makes the largest tensors (an all-true mask)");
  PlanVariants& variants = plan->variants();
  std::lock_guard<std::mutex> lock(variants.mutex());
  auto grown = installed()->replan(*plan, arguments, active.get());
  variants.add(key, grown);
  if (!plan->deferred() && key.matches(plan->solution().input_key)) variants.setReplacedPlanned();
  return grown;
}

}  // namespace jitckpt
