// Solve step (see solve.h).
#include "planner/solve.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "runtime/probes/available_memory.h"
#include "solver/baselines.h"
#include "solver/simulator.h"
#include "solver/strategy.h"

namespace jitckpt {
namespace {

// Runs a solver selection with the plan's options; the solver's std::invalid_argument (a segment
// count the chain cannot have) becomes a user error.
template <typename Select>
solver::Selection selectWith(const solver::Costs& costs, const SolveOptions& options,
                             Select&& select) {
  const int stages = costs.length() - 1;  // periodic schedules segment the model's stages only
  try {
    return select(solver::SelectOptions{options.slots, options.segments, stages, options.given,
                                        options.prologue_gradient_bytes});
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, e.what());
  }
}

solver::Selection select(const solver::Costs& costs, int64_t limit, const SolveOptions& options) {
  return selectWith(costs, options, [&](const solver::SelectOptions& choices) {
    return solver::selectSchedule(costs, limit, options.strategy, choices);
  });
}

// The schedule with the smallest peak the strategy has (solver::selectSmallest).
solver::Selection smallestSelection(const solver::Costs& costs, const SolveOptions& options) {
  solver::Selection found = selectWith(costs, options, [&](const solver::SelectOptions& choices) {
    return solver::selectSmallest(costs, options.strategy, choices);
  });
  TORCH_CHECK(found.feasible, "jitckpt: no schedule of this chain fits any limit: ", found.message);
  return found;
}

// "auto" leaves room for the loss beside the chain: this many times the bytes of the chain's
// floating outputs. Cross-entropy holds float32 copies of the logits (log-softmax's output, its
// gradient, the upcast of bfloat16 logits) while the chain holds its checkpoints; with a large
// vocabulary that is more than the margin.
constexpr int64_t kAutoLossAllowance = 3;

int64_t lossAllowance(const solver::Costs& costs) {
  return kAutoLossAllowance * costs.wd[static_cast<size_t>(costs.length() - 1)];
}

// "auto": the available bytes less the margin, the gradients to come and the loss's allowance.
int64_t autoBudget(const SolveOptions& options, const solver::Costs& costs) {
  TORCH_INTERNAL_ASSERT(options.available_bytes >= 0, "\"auto\" needs the available memory");
  return static_cast<int64_t>(
             std::floor(static_cast<double>(options.available_bytes) * (1 - kAutoMargin))) -
         options.pending_gradient_bytes - lossAllowance(costs);
}

// The limit in bytes and the schedule selected for it.
std::pair<int64_t, solver::Selection> selectForLimit(const solver::MemoryLimit& limit,
                                                     const solver::Costs& costs,
                                                     int64_t unconstrained_peak,
                                                     const SolveOptions& options,
                                                     const InputKey& input_key) {
  using Kind = solver::MemoryLimit::Kind;
  if (limit.kind == Kind::Min) {
    solver::Selection smallest = smallestSelection(costs, options);
    return {smallest.peak, std::move(smallest)};
  }
  if (limit.kind == Kind::Unlimited) {
    solver::Selection selection = select(costs, unconstrained_peak, options);
    if (selection.feasible) return {unconstrained_peak, std::move(selection)};
    // A strategy whose every schedule needs more than no checkpointing (revolve-style on a short
    // chain holds a checkpoint beside each recorded stage): no limit means its smallest, not none.
    solver::Selection smallest = smallestSelection(costs, options);
    return {smallest.peak, std::move(smallest)};
  }
  if (limit.kind != Kind::Auto) {
    int64_t bytes = limit.resolve(unconstrained_peak);
    if (limit.kind == Kind::Fraction) bytes = std::max(bytes, options.least_fraction_bytes);
    solver::Selection selection = select(costs, bytes, options);
    if (selection.feasible || !options.smallest_when_infeasible)
      return {bytes, std::move(selection)};
    return {bytes, smallestSelection(costs, options)};
  }
  const int64_t budget = autoBudget(options, costs);
  solver::Selection selection = select(costs, budget, options);
  if (selection.feasible) return {budget, std::move(selection)};
  solver::Selection smallest = smallestSelection(costs, options);
  TORCH_CHECK(
      smallest.peak <= budget || options.smallest_when_infeasible,
      "jitckpt: memory_limit \"auto\": the device has ",
      solver::formatBytes(options.available_bytes), " available, which leaves ",
      solver::formatBytes(std::max<int64_t>(budget, 0)), " for activations and gradients (after a ",
      static_cast<int>(kAutoMargin * 100), "% margin, ",
      solver::formatBytes(options.pending_gradient_bytes), " of parameter gradients and ",
      solver::formatBytes(lossAllowance(costs)),
      " for the loss on the chain's output), but the smallest limit that works for inputs [",
      input_key.str(), "] is ", solver::formatBytes(smallest.peak),
      ". Free memory, or use a smaller batch or input");
  return {budget, std::move(smallest)};
}

}  // namespace

void availableForActivations(const solver::MemoryLimit& limit, const ChainArguments& arguments,
                             int64_t outside_gradient_bytes, SolveOptions& options) {
  if (limit.kind != solver::MemoryLimit::Kind::Auto) return;
  const std::optional<c10::Device> device = chainDevice(arguments);
  TORCH_CHECK(device, "jitckpt: memory_limit \"auto\" needs a tensor to tell the device; ",
              "give the limit in bytes");
  options.available_bytes = probes::availableMemory(*device);
  options.pending_gradient_bytes = 0;
  for (const auto& t : arguments.lifted_tensors) {
    if (t.defined() && t.requires_grad() && t.is_leaf() && !t.grad().defined())
      options.pending_gradient_bytes += static_cast<int64_t>(t.numel() * t.element_size());
  }
  // (zero_grad(set_to_none=True) frees all of a model's gradients or none)
  if (options.pending_gradient_bytes > 0) options.pending_gradient_bytes += outside_gradient_bytes;
}

int64_t wholeScheduleRoom(const solver::MemoryLimit& limit, const ChainArguments& arguments,
                          bool in_training_call) {
  using Kind = solver::MemoryLimit::Kind;
  const std::optional<c10::Device> device = chainDevice(arguments);
  if (!device) return -1;
  int64_t room = static_cast<int64_t>((1 - kAutoMargin) *
                                      static_cast<double>(probes::availableMemory(*device)));
  if (!in_training_call) return room;
  if (limit.kind == Kind::Bytes) room = std::min(room, static_cast<int64_t>(limit.value));
  if (limit.kind == Kind::Min || (limit.kind == Kind::Fraction && limit.value < 1)) room = 0;
  return room;
}

Solution solveCosts(solver::Costs costs, const solver::MemoryLimit& limit,
                    const SolveOptions& options, InputKey input_key) {
  using solver::MemoryLimit;
  Solution s;
  s.costs = std::move(costs);
  s.costs.wg.resize(s.costs.uf.size(), 0);
  s.costs.wg.back() = options.epilogue_gradient_bytes;
  s.epilogue_gradient_bytes = options.epilogue_gradient_bytes;
  s.prologue_gradient_bytes = options.prologue_gradient_bytes;
  s.strategy = options.strategy;
  s.slots = options.slots;
  s.segments = options.segments;
  s.given = options.given;
  s.input_key = std::move(input_key);
  s.requested_limit = limit;
  const int64_t floor = solver::peakFloor(s.costs, options.prologue_gradient_bytes);
  s.unconstrained_peak =
      std::max(solver::simulate(s.costs, solver::noCheckpointSchedule(s.costs)).peak, floor);
  auto [bytes, selection] =
      selectForLimit(limit, s.costs, s.unconstrained_peak, options, s.input_key);
  s.memory_limit = bytes;
  TORCH_CHECK(selection.feasible, selection.message);
  if (options.smallest_when_infeasible && selection.peak > bytes) {
    TORCH_WARN("jitckpt: no schedule fits the memory limit ", limit.toString(), " (",
               solver::formatBytes(bytes), ") for inputs [", s.input_key.str(),
               "]; these inputs run at their smallest limit, ", solver::formatBytes(selection.peak),
               ". A limit that holds every shape you train on avoids this");
    s.memory_limit = selection.peak;
    s.over_limit = true;
  }
  s.schedule = std::move(selection.schedule);
  s.predicted_peak = selection.peak;
  s.predicted_time = selection.time;
  if (options.strategy == solver::Strategy::Optimal) {
    // (limits below the floor are the floor: their points become one there)
    for (const solver::CurvePoint& p : solver::optimalCurve(s.costs, options.slots)) {
      const solver::CurvePoint at{std::max(p.limit, floor), p.time};
      if (!s.curve.empty() && s.curve.back().limit == at.limit)
        s.curve.back() = at;
      else
        s.curve.push_back(at);
    }
  }
  return s;
}

}  // namespace jitckpt
