// Predicted costs: a chain's costs for new inputs from the profiles of the plans a module already
// has for other sizes of the same stages (solver/cost_fit.h says when they can say). Takes the
// planned plan (its variants' mutex held), the stages to plan and the new input key; returns
// those profiles as samples, with the key's sizes, for solver::predictCosts and scaleTimes.
#pragma once

#include <memory>
#include <vector>

#include "runtime/plan.h"
#include "solver/cost_fit.h"

namespace jitckpt {

struct CostSamples {
  std::vector<c10::intrusive_ptr<Plan>> plans;  // keep the samples' costs alive
  std::vector<solver::CostSample> samples;
  std::vector<int64_t> target;  // the new key's sizes, flattened as the samples' are
};

CostSamples measuredCosts(const Plan& planned, const std::shared_ptr<const ChainStages>& stages,
                          const InputKey& key);

}  // namespace jitckpt
