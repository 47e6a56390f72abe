// Predicted costs (see predicted_costs.h).
#include "planner/predicted_costs.h"

#include <optional>

#include "runtime/replan.h"

namespace jitckpt {
namespace {

// Every size of a key, in order; nothing where its shapes' ranks differ from `like`'s.
std::optional<std::vector<int64_t>> flatSizes(const InputKey& key, const InputKey& like) {
  if (key.shapes.size() != like.shapes.size()) return std::nullopt;
  std::vector<int64_t> sizes;
  for (size_t k = 0; k < key.shapes.size(); ++k) {
    if (key.shapes[k].size() != like.shapes[k].size()) return std::nullopt;
    sizes.insert(sizes.end(), key.shapes[k].begin(), key.shapes[k].end());
  }
  return sizes;
}

}  // namespace

CostSamples measuredCosts(const Plan& planned, const std::shared_ptr<const ChainStages>& stages,
                          const InputKey& key) {
  CostSamples found;
  found.plans = planned.variants().heldPlans();
  // (the planned plan itself, where it was profiled for these stages; a deferred one was not)
  std::vector<const Plan*> plans;
  if (!planned.deferred()) plans.push_back(&planned);
  for (const auto& plan : found.plans) plans.push_back(plan.get());
  for (const Plan* plan : plans) {
    const Solution& s = plan->solution();
    if (plan->sharedStages() != stages || s.predicted || s.input_key.types != key.types) continue;
    if (auto sizes = flatSizes(s.input_key, key)) found.samples.push_back({*sizes, &s.costs});
  }
  found.target = *flatSizes(key, key);
  return found;
}

}  // namespace jitckpt
