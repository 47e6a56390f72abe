// Strategy selection, the one place that turns costs and a limit into the schedule a plan runs.
// Takes a chain's costs, a limit in bytes and a strategy; returns the fastest schedule of that
// strategy whose peak, replayed by the simulator with exact sizes, fits the limit, or why none
// does and the smallest limit that works. Torch-free.
//   optimal   the fastest of the persistent DP's (slots of limit/S, as in the paper), every
//             periodic segment count and no checkpointing: the DP rounds sizes up to slots, so
//             near the smallest feasible limit a baseline can fit where it finds nothing, or run
//             faster; "optimal" is never worse than a baseline. Where nothing fits, the schedule
//             of minimalPeak (exact smallest limit) and of tables just above that limit, so that
//             every limit from the exact smallest one on has a schedule, and an infeasible one is
//             told that limit.
//   periodic  checkpoint_sequential with `segments` segments, or the fastest count that fits.
//   revolve   the revolve-style DP (only a^l checkpoints, an Fall before every B), with the same
//             fallback where nothing fits.
//   none      no checkpointing.
//   given     the schedule of SelectOptions::given, as it is: for tests that run every schedule a
//             chain allows, and for users with a schedule of their own. Refused, naming the
//             first invalid op, when it is not valid and complete for the chain.
#pragma once

#include <cstdint>
#include <string>

#include "solver/costs.h"
#include "solver/persistent_dp.h"
#include "solver/schedule.h"

namespace jitckpt::solver {

enum class Strategy { Optimal, Periodic, Revolve, None, Given };
// "optimal", "periodic", "revolve", "none", "given"; throws std::invalid_argument otherwise.
Strategy parseStrategy(const std::string& name);
std::string toString(Strategy strategy);

struct SelectOptions {
  int slots = 500;            // memory slots of the DP
  int segments = 0;           // periodic: segment count; 0 picks the fastest that fits
  int segmented_stages = -1;  // stages periodic schedules segment (see periodicSchedule)
  Schedule given = {};        // Strategy::Given: the schedule to run
  // Bytes made once the chain's backward has ended, beside all it leaves held (gradients of
  // parameters that only the model's code before the chain reads): every peak is at least
  // peakFloor(chain, after_backward_bytes), and each Selection counts it.
  int64_t after_backward_bytes = 0;
};

// SimulationResult::end_bytes plus `after_backward_bytes` where those are given, else 0: no
// schedule of the chain peaks below it.
int64_t peakFloor(const Costs& chain, int64_t after_backward_bytes);

struct Selection {
  bool feasible = false;
  Schedule schedule;
  int64_t peak = 0;  // simulated, <= the limit
  double time = 0;   // simulated
  // "persistent DP", "revolve-style", "smallest peak", "periodic (k segments)", "no checkpointing".
  std::string origin;
  int segments = 0;                 // periodic schedules: the segment count
  int64_t min_feasible_limit = -1;  // infeasible: the smallest limit a candidate needs (-1: none)
  std::string message;              // infeasible: what was asked, what works, what to do
};

Selection selectSchedule(const Costs& chain, int64_t limit, Strategy strategy,
                         const SelectOptions& options = {});

// The smallest limit at which a schedule of the strategy exists, with the fastest schedule found
// there (memory limit "min"). Optimal and revolve: minimalPeak's limit, exact in bytes, where
// its schedule, the table built up to that limit and (optimal) every periodic count and no
// checkpointing are candidates; one table, where lowering a limit table by table would need
// many. Periodic and none: the smallest peak of their schedules.
Selection selectSmallest(const Costs& chain, Strategy strategy, const SelectOptions& options = {});

// Convenience: solve at `limit`; when infeasible, find the smallest limit that works (at the
// slot resolution of a table built up to the no-checkpointing peak).
SolveResult solveOptimal(const Costs& chain, int64_t limit, int slots = 500);
SolveResult solveRevolve(const Costs& chain, int64_t limit, int slots = 500);

// The time-memory curve of one table up to 1.25 x the no-checkpointing peak (the range a plan
// shows its user).
std::vector<CurvePoint> optimalCurve(const Costs& chain, int slots = 500);

}  // namespace jitckpt::solver
