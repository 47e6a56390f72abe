// Solve step: takes a chain's profiled costs (with the terminal stage), a memory limit and the
// options; returns the Solution a Plan holds: the schedule that solver::selectSchedule picks, its
// predicted peak and time, and, for the optimal strategy, the whole time-memory curve. Errors
// (TORCH_CHECK) for an impossible limit name the smallest limit that works.
//
// Across input shapes (re-plans): bytes mean the same bytes at every shape; a fraction the largest
// of its value times each shape's unconstrained peak planned so far; "min" each shape's smallest.
//
// "min" resolves to the smallest limit at which the strategy finds a schedule (the fastest there);
// "auto" to what the device has available when the plan is made, less a safety margin of
// kAutoMargin (allocator rounding and fragmentation, and tensors made after planning such as the
// optimizer's state), less the parameter gradients that the first backward will allocate, and
// less room for the loss on the chain's output (kAutoLossAllowance in solve.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/plan.h"
#include "runtime/stage_runner.h"
#include "solver/costs.h"
#include "solver/memory_limit.h"
#include "solver/strategy.h"

namespace jitckpt {

struct SolveOptions {
  solver::Strategy strategy = solver::Strategy::Optimal;
  int slots = 500;              // memory slots of the DP
  int segments = 0;             // periodic: segment count; 0 picks the fastest that fits
  solver::Schedule given = {};  // Strategy::Given: the schedule to run
  // For "auto": the device's available bytes and the bytes of parameter gradients not allocated
  // yet (availableForActivations fills both).
  int64_t available_bytes = -1;
  int64_t pending_gradient_bytes = 0;
  // Gradients of the epilogue's parameters, held through the chain's backward: solveCosts makes
  // them the terminal stage's wg (Solution::epilogue_gradient_bytes).
  int64_t epilogue_gradient_bytes = 0;
  // Gradients of the parameters only the prologue reads (Solution::prologue_gradient_bytes).
  int64_t prologue_gradient_bytes = 0;
  // Re-plans for other inputs. A fraction resolves to no fewer bytes than this: the largest
  // budget planned so far, so that a smaller shape is not held to a smaller budget.
  int64_t least_fraction_bytes = 0;
  // Where no schedule fits the limit, the strategy's smallest (Solution::over_limit, one warning)
  // instead of an error: a shape met in training must not stop it.
  bool smallest_when_infeasible = false;
};

constexpr double kAutoMargin = 0.10;

// Fills options.available_bytes and pending_gradient_bytes for the device of `arguments` (that
// of the chain inputs, else of the first lifted tensor) when `limit` is "auto": the gradients of
// the chain's parameters whose .grad is not allocated, and `outside_gradient_bytes` (parameters
// outside the chain) when any of those is not.
void availableForActivations(const solver::MemoryLimit& limit, const ChainArguments& arguments,
                             int64_t outside_gradient_bytes, SolveOptions& options);

// ProfileOptions::whole_schedule_room for a chain on `arguments`' device: the bytes it has
// available less kAutoMargin, and within a training call (a deferred plan's first profile, or a
// re-plan) no more than `limit` where the limit is known before the profile (bytes; a fraction
// below 1 or "min" allow no run). -1 where no tensor tells the device.
int64_t wholeScheduleRoom(const solver::MemoryLimit& limit, const ChainArguments& arguments,
                          bool in_training_call);

Solution solveCosts(solver::Costs costs, const solver::MemoryLimit& limit,
                    const SolveOptions& options, InputKey input_key = {});

}  // namespace jitckpt
