// planForArguments and the installed Replanner (see replan.h).
#include "runtime/replan.h"

namespace jitckpt {
namespace {

std::unique_ptr<Replanner>& installed() {
  static std::unique_ptr<Replanner> replanner;
  return replanner;
}

std::string describe(const std::vector<std::vector<int64_t>>& shapes) {
  std::string text;
  for (const auto& shape : shapes)
    text += (text.empty() ? "" : ", ") + c10::str(c10::IntArrayRef(shape));
  return text;
}

}  // namespace

void installReplanner(std::unique_ptr<Replanner> replanner) { installed() = std::move(replanner); }

c10::intrusive_ptr<Plan> PlanVariants::find(const std::vector<std::vector<int64_t>>& shapes) const {
  auto found = plans_.find(shapes);
  return found == plans_.end() ? c10::intrusive_ptr<Plan>() : found->second;
}

void PlanVariants::add(const std::vector<std::vector<int64_t>>& shapes,
                       c10::intrusive_ptr<Plan> plan) {
  plans_[shapes] = std::move(plan);
}

c10::intrusive_ptr<Plan> planForArguments(const c10::intrusive_ptr<Plan>& plan,
                                          const ChainArguments& arguments) {
  const auto shapes = inputShapes(plan->stages(), arguments);
  const auto& planned = plan->solution().input_shapes;
  if (planned.empty() || shapes == planned) return plan;
  PlanVariants& variants = plan->variants();
  std::lock_guard<std::mutex> lock(variants.mutex());
  if (auto found = variants.find(shapes)) return found;
  TORCH_CHECK(installed(), "jitckpt: chain input shapes [", describe(shapes),
              "] differ from the planned [", describe(planned),
              "] and re-planning needs the jitckpt passes library: import jitckpt, or link "
              "libjitckpt");
  TORCH_WARN("jitckpt: chain input shapes [", describe(shapes), "] differ from the planned [",
             describe(planned),
             "]: profiling and solving again for them at the same limit (once per new shape)");
  auto variant = installed()->replan(*plan, arguments);
  variants.add(shapes, variant);
  return variant;
}

}  // namespace jitckpt
