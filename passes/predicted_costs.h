// Predicted costs: a chain's costs for new inputs without profiling them, from the profiles of
// the plans a module already has for other sizes of the same stages (solver/cost_fit.h says when
// the samples can say). Takes the planned plan (its variants' mutex held), the stages to plan and
// the new input key; returns the costs, or nothing where they must be profiled.
#pragma once

#include <memory>
#include <optional>

#include "runtime/plan.h"
#include "solver/costs.h"

namespace jitckpt {

std::optional<solver::Costs> predictedCosts(const Plan& planned,
                                            const std::shared_ptr<const ChainStages>& stages,
                                            const InputKey& key);

}  // namespace jitckpt
