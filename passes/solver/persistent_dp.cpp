// Optimal persistent DP: table by interval length, memory axis contiguous and vectorized.
#include "passes/solver/persistent_dp.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "passes/solver/baselines.h"
#include "passes/solver/simulator.h"

namespace jitckpt::solver {
namespace {

constexpr float kInf = 1e30f;
constexpr float kFeasible = 1e29f;  // values above this are infeasible (sums of kInf)

// The two candidate values of a cell, written once so that the DP and the backtracking compute
// bit-identical floats.
inline float allValue(float stage_time, float sub) { return stage_time + sub; }
inline float checkpointValue(float forward_time, float right, float left) {
  return (forward_time + right) + left;
}

// out[m] = min(out[m], c + sub[m - shift]) for m in [lo, S]; the hot loop of the DP.
__attribute__((target_clones("avx2", "default"))) void relaxAll(float* __restrict out,
                                                                 const float* __restrict sub,
                                                                 float c, int lo, int S, int shift) {
  for (int m = lo; m <= S; ++m) {
    const float v = allValue(c, sub[m - shift]);
    out[m] = v < out[m] ? v : out[m];
  }
}

__attribute__((target_clones("avx2", "default"))) void relaxCheckpoint(
    float* __restrict out, const float* __restrict right, const float* __restrict left, float c,
    int lo, int S, int shift) {
  for (int m = lo; m <= S; ++m) {
    const float v = checkpointValue(c, right[m - shift], left[m]);
    out[m] = v < out[m] ? v : out[m];
  }
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

PersistentSolver::PersistentSolver(const Chain& chain, int64_t max_limit, int slots,
                                   bool revolve_only)
    : chain_(chain), revolve_only_(revolve_only) {
  validate(chain_);
  if (slots < 1) throw std::invalid_argument("the number of memory slots must be at least 1");
  if (max_limit < 1) throw std::invalid_argument("the memory limit must be at least 1 byte");
  L_ = chain_.length();
  max_limit_ = max_limit;
  slot_ = std::max<int64_t>(1, ceilDiv(max_limit, slots));
  S_ = static_cast<int>(max_limit / slot_);
  build();
}

int PersistentSolver::ememSlots(int s, int t) const {
  return static_cast<int>(std::max(wd_[t] + wabar_[s] + of_[s], wd_[s] + wabar_[s] + wd_[s - 1] + ob_[s]));
}

void PersistentSolver::build() {
  auto toSlots = [&](const std::vector<int64_t>& bytes) {
    std::vector<int64_t> slots(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) slots[i] = ceilDiv(bytes[i], slot_);
    return slots;
  };
  wa_ = toSlots(chain_.wa);
  wabar_ = toSlots(chain_.wabar);
  wd_ = toSlots(chain_.wd);
  of_ = toSlots(chain_.of);
  ob_ = toSlots(chain_.ob);
  prefix_uf_.assign(L_ + 1, 0.0);
  for (int l = 1; l <= L_; ++l) prefix_uf_[l] = prefix_uf_[l - 1] + chain_.uf[l];

  // m_∅(s,t) = wd[t] + max(wa[s] + of[s], max_{s<j<t} wa[j-1] + wa[j] + of[j]).
  nomem_.assign(static_cast<size_t>(L_ + 1) * (L_ + 1), 0);
  for (int s = 1; s <= L_; ++s) {
    int64_t forward_peak = wa_[s] + of_[s];
    for (int t = s + 1; t <= L_; ++t) {
      if (t - 1 > s) forward_peak = std::max(forward_peak, wa_[t - 2] + wa_[t - 1] + of_[t - 1]);
      nomem_[s * (L_ + 1) + t] = static_cast<int>(std::min<int64_t>(wd_[t] + forward_peak, S_ + 1));
    }
  }

  const size_t rows = static_cast<size_t>(L_) * (L_ + 1) / 2;
  table_.assign(rows * (S_ + 1), kInf);
  // first_[row] = the smallest m where the row is finite (S_+1 if none). Rows are non-increasing
  // in m (more memory never hurts), so relaxations start where both sub-rows are finite.
  std::vector<int> first(rows, S_ + 1);
  auto firstOf = [&](int s, int t) -> int& { return first[rowOffset(s, t) / (S_ + 1)]; };
  std::vector<int> plateau_start(rows, S_ + 1);
  auto plateauOf = [&](int s, int t) -> int& { return plateau_start[rowOffset(s, t) / (S_ + 1)]; };
  // Order: t ascending, s descending. Cell (s,t) reads (s',t) for s' > s and (s,t') for t' < t,
  // all filled before it (zero-size shifts included). This order keeps the rows (s',t) of column t
  // hot in cache while the rows (s,t') stream from row s's contiguous storage.
  for (int t = 1; t <= L_; ++t) {
    for (int s = t; s >= 1; --s) {
      const int d = t - s;
      float* out = row(s, t);
      const int emem = ememSlots(s, t);
      const float stage_time = static_cast<float>(chain_.uf[s] + chain_.ub[s]);
      if (d == 0) {
        for (int m = emem; m <= S_; ++m) out[m] = stage_time;
        firstOf(s, t) = plateauOf(s, t) = std::min(emem, S_ + 1);
        continue;
      }
      int row_first = S_ + 1;
      // From column `plateau` on, C_all reaches the lower bound sum(uf + ub) over s..t (nothing
      // recomputed), so no split can do better there: relax the splits below it only.
      int plateau = S_ + 1;
      if (!revolve_only_) {  // C_all: Fall(s), solve (s+1, t) beside abar^s, B(s)
        const int shift = static_cast<int>(std::min<int64_t>(wabar_[s], S_ + 1));
        const int lo = std::max({emem, shift + firstOf(s + 1, t)});
        if (lo <= S_) relaxAll(out, row(s + 1, t), stage_time, lo, S_, shift);
        row_first = std::min(row_first, lo);
        plateau = std::min<int64_t>(S_ + 1, std::max<int64_t>(emem, shift + plateauOf(s + 1, t)));
      }
      plateauOf(s, t) = plateau;
      const int nomem = nomem_[s * (L_ + 1) + t];
      for (int split = s + 1; split <= t; ++split) {  // C_ck: Fck(s), F∅ up to split-1
        const int shift = static_cast<int>(std::min<int64_t>(wa_[split - 1], S_ + 1));
        const int lo = std::max({nomem, shift + firstOf(split, t), firstOf(s, split - 1)});
        const int hi = std::min(S_, plateau - 1);
        if (lo > hi) continue;
        const float forward_time = static_cast<float>(prefix_uf_[split - 1] - prefix_uf_[s - 1]);
        relaxCheckpoint(out, row(split, t), row(s, split - 1), forward_time, lo, hi, shift);
        row_first = std::min(row_first, lo);
      }
      firstOf(s, t) = row_first;
    }
  }
}

void PersistentSolver::backtrack(int s, int t, int m, Schedule& out) const {
  const float value = row(s, t)[m];
  if (s == t) {
    out.push_back({OpKind::ForwardAll, s});
    out.push_back({OpKind::Backward, s});
    return;
  }
  const float stage_time = static_cast<float>(chain_.uf[s] + chain_.ub[s]);
  if (!revolve_only_) {
    const int shift = static_cast<int>(wabar_[s]);
    if (m >= ememSlots(s, t) && m >= shift && allValue(stage_time, row(s + 1, t)[m - shift]) == value) {
      out.push_back({OpKind::ForwardAll, s});
      backtrack(s + 1, t, m - shift, out);
      out.push_back({OpKind::Backward, s});
      return;
    }
  }
  if (m >= nomem_[s * (L_ + 1) + t]) {
    for (int split = s + 1; split <= t; ++split) {
      const int shift = static_cast<int>(wa_[split - 1]);
      if (m < shift) continue;
      const float forward_time = static_cast<float>(prefix_uf_[split - 1] - prefix_uf_[s - 1]);
      if (checkpointValue(forward_time, row(split, t)[m - shift], row(s, split - 1)[m]) != value) continue;
      out.push_back({OpKind::ForwardCheck, s});
      for (int j = s + 1; j < split; ++j) out.push_back({OpKind::ForwardNone, j});
      backtrack(split, t, m - shift, out);
      backtrack(s, split - 1, m, out);
      return;
    }
  }
  throw std::logic_error("persistent DP backtracking found no matching choice");
}

int64_t PersistentSolver::minFeasibleLimit() const {
  const float* top = row(1, L_);
  for (int m = static_cast<int>(wa_[0]); m <= S_; ++m) {
    if (top[m - wa_[0]] < kFeasible) return m * slot_;
  }
  return -1;
}

SolveResult PersistentSolver::solve(int64_t limit) const {
  SolveResult result;
  result.limit = limit;
  if (limit > max_limit_) {
    throw std::invalid_argument("limit " + std::to_string(limit) + " is above the table's maximum " +
                                std::to_string(max_limit_) + ": build the solver for a larger limit");
  }
  const int m = static_cast<int>(std::max<int64_t>(limit, 0) / slot_);
  const int top = m - static_cast<int>(wa_[0]);
  if (top < 0 || row(1, L_)[top] >= kFeasible) {
    result.feasible = false;
    result.min_feasible_limit = minFeasibleLimit();
    result.message = "no persistent schedule fits in " + std::to_string(limit) + " bytes";
    if (result.min_feasible_limit > 0) {
      result.message += "; the smallest limit that works is " + std::to_string(result.min_feasible_limit) +
                        " bytes (at a resolution of " + std::to_string(slot_) + " bytes)";
    }
    return result;
  }
  backtrack(1, L_, top, result.schedule);
  const SimulationResult sim = simulate(chain_, result.schedule);
  if (!sim.valid || !sim.complete || sim.peak > limit) {
    throw std::logic_error("persistent DP produced a schedule the simulator rejects: " + sim.reason);
  }
  result.feasible = true;
  result.time = sim.time;
  result.peak = sim.peak;
  return result;
}

std::vector<CurvePoint> PersistentSolver::curve() const {
  std::vector<CurvePoint> points;
  const float* top = row(1, L_);
  float last = kInf;
  for (int m = static_cast<int>(wa_[0]); m <= S_; ++m) {
    const float value = top[m - wa_[0]];
    if (value < kFeasible && value < last) {
      points.push_back({m * slot_, static_cast<double>(value)});
      last = value;
    }
  }
  return points;
}

namespace {

SolveResult solveWithFallback(const Chain& chain, int64_t limit, int slots, bool revolve_only) {
  PersistentSolver solver(chain, std::max<int64_t>(limit, 1), slots, revolve_only);
  SolveResult result = solver.solve(std::max<int64_t>(limit, 1));
  result.limit = limit;
  if (result.feasible || result.min_feasible_limit > 0) return result;
  // Look for the smallest limit that works in a table that surely contains it: the
  // no-checkpointing schedule is persistent (and revolve-style too for its Fall/B pairs), so its
  // peak plus the rounding of every term is enough.
  const int64_t none_peak = simulate(chain, noCheckpointSchedule(chain)).peak;
  for (int64_t big = std::max<int64_t>(2 * none_peak, 2 * limit + 1); big > 0; big *= 2) {
    PersistentSolver wide(chain, big, slots, revolve_only);
    const int64_t min_limit = wide.minFeasibleLimit();
    if (min_limit > 0) {
      result.min_feasible_limit = min_limit;
      result.message = "no " + std::string(revolve_only ? "revolve-style" : "persistent") +
                       " schedule fits in " + std::to_string(limit) +
                       " bytes; the smallest limit that works is about " + std::to_string(min_limit) +
                       " bytes (resolution " + std::to_string(wide.slotSize()) + " bytes)";
      return result;
    }
    if (big > (int64_t{1} << 60)) break;
  }
  result.message = "no schedule fits in " + std::to_string(limit) + " bytes";
  return result;
}

}  // namespace

SolveResult solveOptimal(const Chain& chain, int64_t limit, int slots) {
  return solveWithFallback(chain, limit, slots, false);
}

SolveResult solveRevolve(const Chain& chain, int64_t limit, int slots) {
  return solveWithFallback(chain, limit, slots, true);
}

}  // namespace jitckpt::solver
