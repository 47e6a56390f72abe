// planForArguments and the installed Replanner (see replan.h).
#include "runtime/replan.h"

#include <algorithm>

#include "runtime/executor.h"

namespace jitckpt {
namespace {

std::unique_ptr<Replanner>& installed() {
  static std::unique_ptr<Replanner> replanner;
  return replanner;
}

}  // namespace

void installReplanner(std::unique_ptr<Replanner> replanner) { installed() = std::move(replanner); }

void PlanVariants::markUsed(Entry& entry) {
  entry.used = ++uses_;
  last_used_ = entry.plan;
  planned_used_last_.store(false, std::memory_order_relaxed);
}

c10::intrusive_ptr<Plan> PlanVariants::find(const InputKey& key) {
  auto found = plans_.find(key);
  if (found == plans_.end()) return {};
  markUsed(found->second);
  return found->second.plan;
}

std::vector<c10::intrusive_ptr<Plan>> PlanVariants::all() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return heldPlans();
}

std::vector<c10::intrusive_ptr<Plan>> PlanVariants::heldPlans() const {
  std::vector<c10::intrusive_ptr<Plan>> plans;
  for (const auto& entry : plans_) plans.push_back(entry.second.plan);
  return plans;
}

c10::intrusive_ptr<Plan> PlanVariants::lastUsed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return planned_used_last_.load() ? c10::intrusive_ptr<Plan>() : last_used_;
}

void PlanVariants::holdLimit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > largest_limit_.load()) largest_limit_.store(bytes);
}

int64_t limitSoFar(const Plan& plan) {
  const int64_t planned = plan.deferred() ? 0 : plan.solution().memory_limit;
  return std::max(planned, plan.variants().largestLimit());
}

void PlanVariants::add(const InputKey& key, c10::intrusive_ptr<Plan> plan) {
  const Solution& solution = plan->solution();
  if (!solution.over_limit && solution.memory_limit > largest_limit_.load())
    largest_limit_.store(solution.memory_limit);
  Entry& entry = plans_[key];
  entry.plan = std::move(plan);
  markUsed(entry);
  while (plans_.size() > kMaxPlans) {
    auto oldest = std::min_element(plans_.begin(), plans_.end(), [](const auto& a, const auto& b) {
      return a.second.used < b.second.used;
    });
    plans_.erase(oldest);
  }
}

c10::intrusive_ptr<Plan> planForArguments(const c10::intrusive_ptr<Plan>& plan,
                                          const ChainArguments& arguments) {
  const InputKey key = inputKey(plan->stages(), arguments, plan->solution().outside_parameters);
  const InputKey& planned = plan->solution().input_key;
  PlanVariants& variants = plan->variants();
  if (!plan->deferred() && (planned.shapes.empty() || key.matches(planned))) {
    if (!variants.replacedPlanned()) {
      variants.usedPlanned();
      return plan;
    }
    std::lock_guard<std::mutex> lock(variants.mutex());
    if (auto found = variants.find(key)) return found;
    variants.usedPlanned();
    return plan;
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
               "]: planning again for them at the limit ",
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
                                            const StageGrew& grew) {
  const InputKey key = inputKey(plan->stages(), arguments, plan->solution().outside_parameters);
  TORCH_CHECK(installed(), "jitckpt: this call's data makes larger tensors than the plan's (",
              grew.what(), ") and re-planning needs the jitckpt passes library: import jitckpt, ",
              "or link libjitckpt");
  TORCH_WARN("jitckpt: ", grew.what(), " (", active->solution().input_key.str(),
             "): the data sets the sizes of this chain's tensors (a boolean mask, nonzero, "
             "unique, a branch or a loop on its values). Profiling and solving again at the limit ",
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
