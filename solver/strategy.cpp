// Strategy selection (see strategy.h).
#include "solver/strategy.h"

#include <algorithm>
#include <stdexcept>

#include "solver/baselines.h"
#include "solver/memory_limit.h"
#include "solver/minimal_peak.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"

namespace jitckpt::solver {
namespace {

// Keeps the fastest valid candidate that fits, and the smallest peak of any candidate, each peak
// raised to `floor` (peakFloor).
class Candidates {
 public:
  Candidates(const Costs& chain, int64_t limit, int64_t floor)
      : chain_(chain), limit_(limit), floor_(floor) {}

  void consider(const Schedule& schedule, const std::string& origin, int segments = 0) {
    const SimulationResult sim = simulate(chain_, schedule);
    if (!sim.valid || !sim.complete) return;
    const int64_t peak = std::max(sim.peak, floor_);
    noteSmallest(peak);
    if (peak > limit_ || (best_.feasible && sim.time >= best_.time)) return;
    best_.feasible = true;
    best_.schedule = schedule;
    best_.time = sim.time;
    best_.peak = peak;
    best_.origin = origin;
    best_.segments = segments;
  }
  // Infeasible: the DP's smallest limit (at its resolution) is a limit that works.
  void consider(const SolveResult& solved, const std::string& origin) {
    if (solved.feasible) consider(solved.schedule, origin);
    if (!solved.feasible && solved.min_feasible_limit > 0)
      noteSmallest(std::max(solved.min_feasible_limit, floor_));
  }
  bool anyFits() const { return best_.feasible; }
  Selection take() {
    if (!best_.feasible) best_.min_feasible_limit = smallest_;
    return std::move(best_);
  }

 private:
  void noteSmallest(int64_t peak) { smallest_ = smallest_ < 0 ? peak : std::min(smallest_, peak); }
  const Costs& chain_;
  int64_t limit_;
  int64_t floor_;
  int64_t smallest_ = -1;
  Selection best_;
};

std::string describe(Strategy strategy) {
  return strategy == Strategy::Optimal   ? "checkpointing"
         : strategy == Strategy::None    ? "no-checkpointing"
         : strategy == Strategy::Revolve ? "revolve-style"
         : strategy == Strategy::Given   ? "given"
                                         : "periodic";
}

std::string infeasibleMessage(const Costs& chain, int64_t limit, Strategy strategy,
                              const Selection& selection, const SelectOptions& options) {
  const int64_t unconstrained = std::max(simulate(chain, noCheckpointSchedule(chain)).peak,
                                         peakFloor(chain, options.after_backward_bytes));
  std::string text = "no " + describe(strategy) + " schedule";
  if (strategy == Strategy::Periodic && options.segments > 0)
    text += " with " + std::to_string(options.segments) + " segments";
  int64_t gradients = 0;
  for (int l = 1; l <= chain.length(); ++l) gradients += chain.gradientBytes(l);
  text += " fits in a memory limit of " + formatBytes(limit) + " for activations" +
          (gradients > 0 ? " and parameter gradients" : "") + " (the unconstrained peak is " +
          formatBytes(unconstrained) + ")";
  if (selection.min_feasible_limit > 0) {
    text += "; the smallest limit that works is " + formatBytes(selection.min_feasible_limit) +
            " (" + std::to_string(selection.min_feasible_limit) + " bytes)";
  }
  // Gradients the backward ends up holding are a floor no schedule goes below.
  if (gradients > 0)
    text += "; the chain's parameter gradients alone take " + formatBytes(gradients);
  if (options.after_backward_bytes > 0)
    text += ", and those made after its backward " + formatBytes(options.after_backward_bytes);
  if (!chain.runs_once.empty() && (strategy == Strategy::Periodic || strategy == Strategy::Revolve))
    text += "; stage " + std::to_string(chain.runs_once.front()) +
            " runs forward once (its random draws cannot be replayed), and this strategy "
            "recomputes it: use the optimal strategy";
  return text + ". Raise the limit, or use a smaller batch or input";
}

// Periodic schedules with first..last segments.
void considerPeriodic(Candidates& candidates, const Costs& chain, int first, int last,
                      const SelectOptions& options) {
  const int segmented = options.segmented_stages < 0 ? chain.length() : options.segmented_stages;
  if (last < 0) last = segmented;
  if (last > segmented)
    throw std::invalid_argument("periodic: " + std::to_string(last) + " segments for a chain of " +
                                std::to_string(segmented) + " stages");
  for (int k = first; k <= last; ++k) {
    candidates.consider(periodicSchedule(chain, k, segmented),
                        "periodic (" + std::to_string(k) + " segments)", k);
  }
}

// The recurrence's schedule at the smallest limit is not the fastest there (minimal_peak.h), and a
// table built up to that limit rounds sizes up to its slots and finds nothing. Tables a few slots
// above it do: their schedules at the first grid limits that work have real peaks at the smallest
// limit too, and faster (about twice on ResNet-1001). Tables 8 and 32 slots above found such a
// schedule on every chain tried, nearly as fast as the best of 1 to 32 slots; 1 or 2 found none.
void considerTablesAbove(Candidates& candidates, const Costs& chain, int64_t smallest, int slots,
                         bool revolve_only) {
  const std::string origin = revolve_only ? "revolve-style" : "persistent DP";
  for (int64_t above : {8, 32}) {
    const int64_t limit = smallest + above * (smallest / slots + 1);
    const PersistentSolver table(chain, limit, slots, revolve_only);
    const int64_t first = table.minFeasibleLimit();
    for (int grid = 0; first > 0 && grid < 64; ++grid) {
      const int64_t at = first + grid * table.slotSize();
      if (at > limit) break;
      const SolveResult solved = table.solve(at);  // kept where its peak fits the candidates' limit
      if (solved.feasible) candidates.consider(solved.schedule, origin);
    }
  }
}

// Where the table finds nothing: minimalPeak's schedule, which fits from the exact smallest limit
// on (the infeasible message then names that limit, not one the table's slots round above it),
// and when the limit is not below it, the tables just above it.
void considerSmallestPeak(Candidates& candidates, const Costs& chain, int64_t limit, int slots,
                          bool revolve_only) {
  if (candidates.anyFits()) return;
  const MinimalPeak least = minimalPeak(chain, revolve_only);
  if (least.limit < 0) return;
  candidates.consider(least.schedule, "smallest peak");
  if (least.limit <= limit)
    considerTablesAbove(candidates, chain, least.limit, slots, revolve_only);
}

}  // namespace

int64_t peakFloor(const Costs& chain, int64_t after_backward_bytes) {
  if (after_backward_bytes <= 0) return 0;
  return simulate(chain, noCheckpointSchedule(chain)).end_bytes + after_backward_bytes;
}

Strategy parseStrategy(const std::string& name) {
  if (name == "optimal") return Strategy::Optimal;
  if (name == "periodic") return Strategy::Periodic;
  if (name == "revolve") return Strategy::Revolve;
  if (name == "none") return Strategy::None;
  if (name == "given") return Strategy::Given;
  throw std::invalid_argument("unknown strategy '" + name +
                              "': use optimal, periodic, revolve or none");
}

std::string toString(Strategy strategy) {
  switch (strategy) {
    case Strategy::Optimal:
      return "optimal";
    case Strategy::Periodic:
      return "periodic";
    case Strategy::Revolve:
      return "revolve";
    case Strategy::None:
      return "none";
    case Strategy::Given:
      return "given";
  }
  return "?";
}

namespace {
void checkSlots(const SelectOptions& options) {
  if (options.slots < 1)
    throw std::invalid_argument("the number of memory slots must be at least 1, not " +
                                std::to_string(options.slots));
}

// The given schedule, simulated, its peak raised to peakFloor; std::invalid_argument where it is
// not valid and complete.
SimulationResult simulateGiven(const Costs& chain, const SelectOptions& options) {
  const Schedule& given = options.given;
  SimulationResult sim = simulate(chain, given);
  if (!sim.valid) {
    throw std::invalid_argument("the given schedule is not valid for this chain of " +
                                std::to_string(chain.length()) + " stages (the last one the " +
                                "hand-off to autograd): op " +
                                std::to_string(sim.first_invalid_op + 1) + ", " + sim.reason);
  }
  if (!sim.complete) {
    throw std::invalid_argument(
        "the given schedule ends before B(1): it must compute the gradient of every stage");
  }
  sim.peak = std::max(sim.peak, peakFloor(chain, options.after_backward_bytes));
  return sim;
}

Selection givenSelection(const SimulationResult& sim, const Schedule& given) {
  Selection selection;
  selection.feasible = true;
  selection.schedule = given;
  selection.peak = sim.peak;
  selection.time = sim.time;
  selection.origin = "given";
  return selection;
}
}  // namespace

Selection selectSchedule(const Costs& chain, int64_t limit, Strategy strategy,
                         const SelectOptions& options) {
  checkSlots(options);
  if (strategy == Strategy::Given) {
    const SimulationResult sim = simulateGiven(chain, options);
    if (sim.peak <= limit) return givenSelection(sim, options.given);
    Selection selection;
    selection.min_feasible_limit = sim.peak;
    selection.message = "the given schedule's peak is " + formatBytes(sim.peak) + " (" +
                        std::to_string(sim.peak) + " bytes), above the memory limit of " +
                        formatBytes(limit) + "; raise the limit, or give another schedule";
    return selection;
  }
  Candidates candidates(chain, limit, peakFloor(chain, options.after_backward_bytes));
  switch (strategy) {
    case Strategy::Optimal:
      // Where no checkpointing fits, it is optimal and no table is needed: every schedule runs
      // each stage's Fall and B at least once, and recomputation only adds.
      candidates.consider(noCheckpointSchedule(chain), "no checkpointing");
      if (candidates.anyFits()) break;
      // (No revolve-style table: its choices are a subset of the persistent DP's, at the same
      // slot sizes, so it is never faster; the periodic schedules are not discretized.)
      candidates.consider(solveOptimal(chain, limit, options.slots), "persistent DP");
      considerSmallestPeak(candidates, chain, limit, options.slots, false);
      considerPeriodic(candidates, chain, 1, -1, options);
      break;
    case Strategy::Periodic:
      if (options.segments > 0)
        considerPeriodic(candidates, chain, options.segments, options.segments, options);
      else
        considerPeriodic(candidates, chain, 1, -1, options);
      break;
    case Strategy::Revolve:
      candidates.consider(solveRevolve(chain, limit, options.slots), "revolve-style");
      considerSmallestPeak(candidates, chain, limit, options.slots, true);
      break;
    case Strategy::None:
      candidates.consider(noCheckpointSchedule(chain), "no checkpointing");
      break;
    case Strategy::Given:
      break;
  }
  Selection selection = candidates.take();
  if (!selection.feasible)
    selection.message = infeasibleMessage(chain, limit, strategy, selection, options);
  return selection;
}

Selection selectSmallest(const Costs& chain, Strategy strategy, const SelectOptions& options) {
  checkSlots(options);
  if (strategy == Strategy::Given)
    return givenSelection(simulateGiven(chain, options), options.given);
  if (strategy == Strategy::Periodic || strategy == Strategy::None) {
    const Selection below = selectSchedule(chain, 0, strategy, options);
    if (below.feasible || below.min_feasible_limit < 0) return below;
    return selectSchedule(chain, below.min_feasible_limit, strategy, options);
  }
  const bool revolve_only = strategy == Strategy::Revolve;
  const MinimalPeak least = minimalPeak(chain, revolve_only);
  if (least.limit < 0) {
    Selection none;
    none.message = infeasibleMessage(chain, 0, strategy, none, options);
    return none;
  }
  const int64_t floor = peakFloor(chain, options.after_backward_bytes);
  Candidates candidates(chain, std::max(least.limit, floor), floor);
  considerTablesAbove(candidates, chain, least.limit, options.slots, revolve_only);
  // (where the floor is above the chain's own smallest peak, the table at the floor's limit)
  if (floor > least.limit)
    candidates.consider(revolve_only ? solveRevolve(chain, floor, options.slots)
                                     : solveOptimal(chain, floor, options.slots),
                        revolve_only ? "revolve-style" : "persistent DP");
  candidates.consider(least.schedule, "smallest peak");
  if (strategy == Strategy::Optimal) {
    considerPeriodic(candidates, chain, 1, -1, options);
    candidates.consider(noCheckpointSchedule(chain), "no checkpointing");
  }
  Selection selection = candidates.take();
  if (!selection.feasible)  // minimalPeak's own schedule fits its limit
    throw std::logic_error("selectSmallest: nothing fits the smallest peak " +
                           std::to_string(least.limit));
  return selection;
}

namespace {

// The largest limit of the table that optimalCurve builds.
int64_t curveMaxLimit(int64_t unconstrained_peak) {
  return std::max<int64_t>(unconstrained_peak + unconstrained_peak / 4, 1);
}

SolveResult solveWithFallback(const Costs& chain, int64_t limit, int slots, bool revolve_only) {
  // Revolve-style recomputes every stage but the last: a stage that runs once leaves no schedule.
  if (revolve_only && !chain.runs_once.empty() && chain.runs_once.front() < chain.length()) {
    SolveResult none;
    none.limit = limit;
    none.message = "no revolve-style schedule: it recomputes stage " +
                   std::to_string(chain.runs_once.front()) + ", which runs forward once";
    return none;
  }
  PersistentSolver solver(chain, std::max<int64_t>(limit, 1), slots, revolve_only);
  SolveResult result = solver.solve(std::max<int64_t>(limit, 1));
  result.limit = limit;
  if (result.feasible) return result;
  // Near the smallest limit, rounding sizes up to this table's slots can lose a schedule that the
  // curve's table (other slots) finds: a limit read off the curve must work, so ask that table.
  const int64_t none_peak = simulate(chain, noCheckpointSchedule(chain)).peak;
  if (limit >= 1 && limit <= curveMaxLimit(none_peak)) {
    SolveResult there =
        PersistentSolver(chain, curveMaxLimit(none_peak), slots, revolve_only).solve(limit);
    there.limit = limit;
    if (there.feasible) return there;
    if (there.min_feasible_limit > 0 &&
        (result.min_feasible_limit <= 0 || there.min_feasible_limit < result.min_feasible_limit))
      result = std::move(there);
  }
  if (result.min_feasible_limit > 0) return result;
  // Find the smallest limit that works in a table that surely contains it: every term of the
  // no-checkpointing peak (persistent, and revolve-style too) rounds up by at most one slot.
  for (int64_t big = std::max<int64_t>(2 * none_peak, 2 * limit + 1); big > 0; big *= 2) {
    PersistentSolver wide(chain, big, slots, revolve_only);
    const int64_t min_limit = wide.minFeasibleLimit();
    if (min_limit > 0) {
      result.min_feasible_limit = min_limit;
      result.message = "no " + std::string(revolve_only ? "revolve-style" : "persistent") +
                       " schedule fits in " + std::to_string(limit) +
                       " bytes; the smallest limit that works is about " +
                       std::to_string(min_limit) + " bytes (within one slot of " +
                       std::to_string(wide.slotSize()) + " bytes)";
      return result;
    }
    if (big > (int64_t{1} << 60)) break;
  }
  result.message = "no schedule fits in " + std::to_string(limit) + " bytes";
  return result;
}

}  // namespace

SolveResult solveOptimal(const Costs& chain, int64_t limit, int slots) {
  return solveWithFallback(chain, limit, slots, false);
}

SolveResult solveRevolve(const Costs& chain, int64_t limit, int slots) {
  return solveWithFallback(chain, limit, slots, true);
}

std::vector<CurvePoint> optimalCurve(const Costs& chain, int slots) {
  const int64_t unconstrained = simulate(chain, noCheckpointSchedule(chain)).peak;
  return PersistentSolver(chain, curveMaxLimit(unconstrained), slots).curve();
}

}  // namespace jitckpt::solver
