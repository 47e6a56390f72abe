// Optimal persistent schedule (paper, Theorem 1 and Algorithms 1-2), memory discretized in S
// slots. Takes a Costs and the largest limit M of interest; one table answers every limit up to
// M (the whole time-memory curve from one solve). Standard C++ only.
//
// Departures from the paper's formulas, so that the DP is exactly optimal under the simulator:
//  - m_all(s,t) charges B(s) with wd[s] + wabar[s] + wd[s-1] + ob[s]: the gradient delta^{s-1}
//    that B(s) produces coexists with its inputs (the paper omits wd[s-1]).
//  - Algorithm 2 lists F∅ up to s'; the forward run of C_ck ends at F∅(s'-1), as its time
//    (sum of uf[s..s'-1]) says. Each split checks the peak of its own forward run instead of
//    the paper's m_∅(s,t), a lower bound over all splits that pass-throughs would break.
//  - Fck and F∅ are charged their own time and overhead (Costs::uf_nograd, of_nograd), Fall its.
//  - Parameter gradients (Costs::wg, an extension of the paper's model): (s,t) is solved beside
//    the gradients of stages after t, so they are outside its m; (s, s'-1) in C_ck runs beside
//    those of s'..t, and B(s) in C_all beside those of s+1..t.
//  - Stages that pass tensors through (Costs::spans): abar^s costs abarOwnBytes, what a^{s-1}
//    does not already hold, in C_all and in m_all; the checkpoint a^{s'-1} of C_ck costs what
//    a^{s-1} does not hold of it (ChainSizes::kept), and so does each activation of its forward
//    run, which makes only what its input does not pass on. Every activation held beside (s,t)'s
//    input was computed from it, so a sub-chain's memory depends on its input alone.
//  - Stages that run forward once (Costs::runs_once): C_ck at (s,t) runs s..s'-1 twice, so its
//    splits stop at the first such stage from s on; C_all runs s once.
//  - Sizes are rounded up to slots and a limit rounded down, so the real peak of a schedule
//    is never above the limit it was solved for. With slot size 1 (S = M) the DP is exact.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "solver/chain_sizes.h"
#include "solver/costs.h"
#include "solver/schedule.h"

namespace jitckpt::solver {

namespace detail {
// Row (s,t) of the table, compressed: C[s,t,m] is +inf for m < first, data[m - first] for
// first <= m < end, and `min` (the value at m = S) from end on. Rows are non-increasing in m
// (storeRow finds first and end by binary search), and most of a row is the infinite prefix or
// the constant tail, so storing only the middle keeps the table a few times smaller (the DP is
// bound by memory traffic, not arithmetic). `data` points into the solver's chunks, which never
// move, and is followed by copies of `min` (persistent_dp.cpp reads whole blocks).
struct StoredRow {
  const float* data = nullptr;
  int first = 0;
  int end = 0;
  float min = 0;
};
struct SplitBase;  // what a split takes from s alone, shared by a block of columns
}  // namespace detail

struct SolveResult {
  bool feasible = false;
  Schedule schedule;
  double time = 0;    // simulated time of the schedule (equals the DP value)
  int64_t peak = 0;   // simulated peak with real sizes, <= limit
  int64_t limit = 0;  // the limit asked for
  // Smallest limit that works at this slot resolution, or -1 when even the largest limit of the
  // table does not (then solveOptimal looks further).
  int64_t min_feasible_limit = -1;
  std::string message;  // for an infeasible limit: what to do
};

struct CurvePoint {
  int64_t limit;  // bytes
  double time;    // optimal time at that limit
};

class PersistentSolver {
 public:
  // revolve_only: keep only a^l checkpoints, with an Fall right before every B (the paper's
  // heterogeneous "revolve" baseline).
  PersistentSolver(const Costs& chain, int64_t max_limit, int slots = 500,
                   bool revolve_only = false);

  SolveResult solve(int64_t limit) const;
  // One point per limit (in slot steps) where the optimal time drops.
  std::vector<CurvePoint> curve() const;
  int64_t slotSize() const { return slot_; }
  int64_t maxLimit() const { return max_limit_; }
  int64_t minFeasibleLimit() const;  // -1 when none up to maxLimit()
  size_t tableBytes() const;         // memory the table holds (rows and their values)
  // C[s,t,m] as the table holds it, for 1 <= s <= t <= L and 0 <= m <= S (slots); above 1e29
  // where nothing fits. For tests and inspection.
  float cell(int s, int t, int m) const;
  int slots() const { return S_; }

 private:
  using Row = detail::StoredRow;
  // Column-major triangle: column t holds s = 1..t contiguously.
  static size_t rowIndex(int s, int t) { return static_cast<size_t>(t) * (t - 1) / 2 + (s - 1); }
  // The same rows again, row-major (row s holds t = s..L): a cell reads its left rows (s, s'-1)
  // in order of s', and the column-major layout would scatter those reads over the table.
  size_t rowByStartIndex(int s, int t) const { return static_cast<size_t>(s) * (L_ + 1) + t; }
  float value(int s, int t, int m) const;
  int ememSlots(int s, int t) const;
  // Peak of Fck(s), F∅(s+1..last) beside delta^t, in slots (capped at S_ + 1).
  int sweepSlots(int s, int last, int t) const {
    return besideDelta(sweep_[static_cast<size_t>(s) * (L_ + 1) + last], t);
  }
  // A forward run's peak `run` (sweep_) with delta^t beside it, in slots (capped at S_ + 1).
  int besideDelta(int run, int t) const {
    return static_cast<int>(std::min<int64_t>(sizes_.wd[t] + run, S_ + 1));
  }
  // Parameter gradients of stages first..last in slots (0 when first > last).
  int gradientSlots(int first, int last) const {
    return gradient_slots_[static_cast<size_t>(last) * (L_ + 2) + first];
  }
  void build();
  void computeRow(int s, int t, std::vector<float>& out,
                  const std::vector<detail::SplitBase>& bases);
  void storeRow(int s, int t, const float* out);
  void backtrack(int s, int t, int m, Schedule& out) const;

  Costs chain_;
  int L_ = 0;
  int64_t max_limit_ = 0;
  int64_t slot_ = 1;
  int S_ = 0;  // number of slots in the table (m = 0..S_)
  bool revolve_only_ = false;
  ChainSizes sizes_;               // in slots, capped at S_ + 1
  std::vector<double> prefix_uf_;  // prefix_uf_[l]: no-grad forward times of stages 1..l
  // (first, last) -> gradients of first..last in slots, stored by last: a cell reads a column.
  std::vector<int> gradient_slots_;
  std::vector<int> sweep_;  // (s,last) -> peak of Fck(s), F∅(s+1..last), (L+1) x (L+1)
  std::vector<Row> rows_;
  std::vector<Row> rows_by_start_;
  std::vector<std::unique_ptr<float[], void (*)(void*)>> chunks_;
  size_t chunk_size_ = 0, chunk_used_ = 0;
};

}  // namespace jitckpt::solver
