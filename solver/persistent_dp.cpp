// Optimal persistent DP (Theorem 1, Algorithms 1-2). Takes a Costs and the largest limit M;
// builds C[s,t,m] once (m in slots of ceil(M/S) bytes) and answers any limit <= M by
// backtracking, recomputing the argmins instead of storing them.
//
// The DP is bound by memory traffic, not arithmetic, so its layout is chosen for the caches: rows
// are stored compressed (StoredRow) and both row-major and column-major, so that both operands of
// a split are read in order; cells are filled in blocks of columns, so that the rows those cells
// read stay in the caches; and each split relaxes only the slots where it can still win
// (dp_kernels.h). What each choice measured: bench/results/README.md, "The solver alone".
#include "solver/persistent_dp.h"

#include <algorithm>
#include <stdexcept>

#include "solver/dp_kernels.h"
#include "solver/simulator.h"

namespace jitckpt::solver {
namespace {

using detail::allValue;
using detail::checkpointValue;
using detail::kBlock;
using detail::kFeasible;
using detail::kInf;
using detail::kRowPadding;
using detail::SplitBase;

// Columns t filled together (cache blocking): a block reads its left rows once, so the wider
// the fewer passes over the table, while its columns' rows (the right rows, read by every cell
// below them) should stay in the last-level cache. The rows of a block fill at most this many
// bytes at full width (bench/results/README.md, "The solver alone").
constexpr size_t kColumnBlockBytes = size_t{24} << 20;

int columnBlock(int L, int S) {
  const size_t column_bytes = static_cast<size_t>(L) * (S + 1 + kRowPadding) * sizeof(float);
  return static_cast<int>(std::clamp<size_t>(kColumnBlockBytes / column_bytes, 8, 64));
}

const Costs& validated(const Costs& chain, int64_t max_limit, int slots) {
  validate(chain);
  if (slots < 1) throw std::invalid_argument("the number of memory slots must be at least 1");
  if (max_limit < 1) throw std::invalid_argument("the memory limit must be at least 1 byte");
  return chain;
}

}  // namespace

PersistentSolver::PersistentSolver(const Costs& chain, int64_t max_limit, int slots,
                                   bool revolve_only)
    : chain_(validated(chain, max_limit, slots)),
      L_(chain_.length()),
      max_limit_(max_limit),
      slot_(std::max<int64_t>(1, ceilDiv(max_limit, slots))),
      S_(static_cast<int>(max_limit / slot_)),
      revolve_only_(revolve_only),
      sizes_(chain_, slot_, S_ + 1) {
  build();
}

// The C_all peak (ChainSizes::allPeak) in slots.
int PersistentSolver::ememSlots(int s, int t) const {
  return static_cast<int>(sizes_.allPeak(s, t, sizes_.allGradients(s, t)));
}

float PersistentSolver::cell(int s, int t, int m) const {
  if (s < 1 || t < s || t > L_ || m < 0 || m > S_)
    throw std::out_of_range("PersistentSolver::cell: (" + std::to_string(s) + ", " +
                            std::to_string(t) + ", " + std::to_string(m) +
                            ") is outside the table of " + std::to_string(L_) + " stages and " +
                            std::to_string(S_) + " slots");
  return value(s, t, m);
}

float PersistentSolver::value(int s, int t, int m) const {
  const Row& r = rows_[rowIndex(s, t)];
  if (m < r.first) return kInf;
  if (m >= r.end) return r.min;
  return r.data[m - r.first];
}

void PersistentSolver::build() {
  prefix_uf_.assign(L_ + 1, 0.0);
  // Fck and F∅ run without recording: their own time (Costs::noGradForward).
  for (int l = 1; l <= L_; ++l) prefix_uf_[l] = prefix_uf_[l - 1] + chain_.noGradForward(l);
  // Gradients of stages first..last in slots, tabled: the DP reads one per split.
  gradient_slots_.assign(static_cast<size_t>(L_ + 2) * (L_ + 1), 0);
  for (int first = 1; first <= L_; ++first) {
    for (int last = first; last <= L_; ++last)
      gradient_slots_[static_cast<size_t>(last) * (L_ + 2) + first] =
          static_cast<int>(sizes_.gradients(first, last));
  }

  // The forward run of C_ck (ChainSizes::runStart, runStep). The paper's m_∅(s,t) takes it up to
  // t-1 for every split as a lower bound on (s,t); here each split s' checks its own run (to
  // s'-1), and its two sub-problems check the rest. That is exact, and stays so where stages pass
  // tensors through (Costs::spans) and a later F(j) may cost less than wa[j-1] + wa[j].
  sweep_.assign(static_cast<size_t>(L_ + 1) * (L_ + 1), 0);
  for (int s = 1; s <= L_; ++s) {
    int64_t peak = sizes_.runStart(s);
    for (int k = s; k <= L_; ++k) {
      if (k > s) peak = std::max(peak, sizes_.runStep(s, k));
      sweep_[static_cast<size_t>(s) * (L_ + 1) + k] =
          static_cast<int>(std::min<int64_t>(peak, S_ + 1));
    }
  }

  rows_.assign(static_cast<size_t>(L_) * (L_ + 1) / 2, Row{});
  rows_by_start_.assign(static_cast<size_t>(L_ + 1) * (L_ + 1), Row{});
  chunks_.clear();
  // 4 MB chunks, or room for every row at full width where that is less (small tables).
  const size_t row_room = static_cast<size_t>(S_) + 1 + kRowPadding;
  chunk_size_ = std::max(row_room, std::min(size_t{1} << 20, rows_.size() * row_room));
  chunk_used_ = chunk_size_;
  std::vector<float> out(static_cast<size_t>(S_) + 1 + kBlock);  // blocks may run past S
  std::vector<SplitBase> bases;
  // Cell (s,t) reads (s',t) for s' > s and (s,t') for t' < t. Within a block of columns, s runs
  // downwards and t upwards, so both are ready; zero-size shifts read the same m, which is fine
  // because those rows belong to shorter intervals. The rows (s,t') of row s are read once per
  // block instead of once per column.
  const int column_block = columnBlock(L_, S_);
  for (int t0 = 1; t0 <= L_; t0 += column_block) {
    const int t1 = std::min(L_, t0 + column_block - 1);
    for (int s = t1; s >= 1; --s) {
      bases.resize(static_cast<size_t>(std::max(0, t1 - s)));
      // Rows (s, s'-1) that lie in this block are built here, each just before its split is read.
      auto fill = [&](int split) {
        const Row& left = rows_by_start_[rowByStartIndex(s, split - 1)];
        SplitBase& b = bases[static_cast<size_t>(split - s - 1)];
        b.left = left.data;
        b.left_first = left.first;
        b.left_width = left.end - left.first;
        b.left_min = left.min;
        b.shift = static_cast<int>(sizes_.kept(s - 1, split - 1));
        b.sweep = sweep_[static_cast<size_t>(s) * (L_ + 1) + split - 1];
        b.c = static_cast<float>(prefix_uf_[split - 1] - prefix_uf_[s - 1]);
      };
      for (int split = s + 1; split <= std::max(s, t0); ++split) fill(split);
      for (int t = std::max(s, t0); t <= t1; ++t) {
        computeRow(s, t, out, bases);
        if (t < t1) fill(t + 1);
      }
    }
  }
}

void PersistentSolver::computeRow(int s, int t, std::vector<float>& buffer,
                                  const std::vector<SplitBase>& bases) {
  float* out = buffer.data();
  std::fill(buffer.begin(), buffer.begin() + S_ + 1, kInf);
  std::fill(buffer.begin() + S_ + 1, buffer.end(), -kInf);  // ends every split's run (relaxSplits)
  const int emem = ememSlots(s, t);
  const float stage_time = static_cast<float>(chain_.uf[s] + chain_.ub[s]);
  if (s == t) {  // C[s,s,m] = uf[s] + ub[s] from m_all(s,s) on
    if (emem <= S_) detail::relaxAll(out, nullptr, 0, stage_time, 0.0f, emem, emem, S_);
  } else {
    if (!revolve_only_) {  // C_all: Fall(s), solve (s+1, t) beside abar^s, B(s)
      const Row& sub = rows_[rowIndex(s + 1, t)];
      const int shift = static_cast<int>(sizes_.abar_own[s]);
      const int lo = std::max(emem, shift + sub.first);
      const int split_at = std::min(S_ + 1, std::max(lo, shift + sub.end));  // sub's constant tail
      if (lo <= S_)
        detail::relaxAll(out, sub.data, shift + sub.first, stage_time, sub.min, lo, split_at, S_);
    }
    // C_ck: Fck(s), F∅(s+1..s'-1), solve (s', t) beside a^{s'-1} (what a^{s-1} does not hold of
    // it), then (s, s'-1) beside the parameter gradients of s'..t.
    detail::relaxSplits(out, bases.data(), &rows_[rowIndex(s + 1, t)],
                        &gradient_slots_[static_cast<size_t>(t) * (L_ + 2) + s + 1],
                        sizes_.lastSplit(s, t) - s, static_cast<int>(sizes_.wd[t]), S_);
  }
  storeRow(s, t, out);
}

// Stores row (s,t) compressed: from the first finite m to the start of the constant tail.
void PersistentSolver::storeRow(int s, int t, const float* out) {
  // The row is non-increasing in m (see relaxSplits): both ends are binary searches.
#ifndef NDEBUG
  for (int m = 0; m < S_; ++m) {
    if (out[m + 1] > out[m])
      throw std::logic_error("persistent DP: row (" + std::to_string(s) + ", " + std::to_string(t) +
                             ") increases at m = " + std::to_string(m));
  }
#endif
  Row& row = rows_[rowIndex(s, t)];
  const float* const past = out + S_ + 1;
  const int first = static_cast<int>(
      std::partition_point(out, past, [](float v) { return v >= kFeasible; }) - out);
  row.first = first;
  row.min = first <= S_ ? out[S_] : kInf;
  const float min = row.min;
  const int end =
      first > S_
          ? first
          : static_cast<int>(
                std::partition_point(out + first, past, [min](float v) { return v != min; }) - out);
  row.end = end;
  const size_t width = static_cast<size_t>(end - first);
  if (chunks_.empty() || chunk_used_ + width + kRowPadding > chunk_size_) {
    chunks_.push_back(detail::allocateRowChunk(chunk_size_));
    chunk_used_ = 0;
  }
  float* stored = chunks_.back().get() + chunk_used_;
  std::copy(out + first, out + end, stored);
  std::fill(stored + width, stored + width + kRowPadding, row.min);  // see relaxSplits
  chunk_used_ += width + kRowPadding;
  row.data = stored;
  rows_by_start_[rowByStartIndex(s, t)] = row;
}

void PersistentSolver::backtrack(int s, int t, int m, Schedule& out) const {
  const float target = value(s, t, m);
  if (s == t) {
    out.push_back({OpKind::ForwardAll, s});
    out.push_back({OpKind::Backward, s});
    return;
  }
  const float stage_time = static_cast<float>(chain_.uf[s] + chain_.ub[s]);
  if (!revolve_only_) {
    const int shift = static_cast<int>(sizes_.abar_own[s]);
    if (m >= ememSlots(s, t) && m >= shift &&
        allValue(stage_time, value(s + 1, t, m - shift)) == target) {
      out.push_back({OpKind::ForwardAll, s});
      backtrack(s + 1, t, m - shift, out);
      out.push_back({OpKind::Backward, s});
      return;
    }
  }
  for (int split = s + 1; split <= sizes_.lastSplit(s, t); ++split) {
    const int shift = static_cast<int>(sizes_.kept(s - 1, split - 1));
    const int left_shift = gradientSlots(split, t);
    if (m < sweepSlots(s, split - 1, t) || m < shift || m < left_shift) continue;
    const float forward_time = static_cast<float>(prefix_uf_[split - 1] - prefix_uf_[s - 1]);
    if (checkpointValue(forward_time, value(split, t, m - shift),
                        value(s, split - 1, m - left_shift)) != target)
      continue;
    // Algorithm 2 says F∅ up to s'; the forward run ends at s'-1 (its time is uf[s..s'-1]).
    out.push_back({OpKind::ForwardCheck, s});
    for (int j = s + 1; j < split; ++j) out.push_back({OpKind::ForwardNone, j});
    backtrack(split, t, m - shift, out);
    backtrack(s, split - 1, m - left_shift, out);
    return;
  }
  throw std::logic_error("persistent DP backtracking found no matching choice");
}

int64_t PersistentSolver::minFeasibleLimit() const {
  const Row& top = rows_[rowIndex(1, L_)];
  const int64_t m = top.first + sizes_.wa[0];
  return top.first <= S_ && m <= S_ ? m * slot_ : -1;
}

size_t PersistentSolver::tableBytes() const {
  return chunks_.size() * chunk_size_ * sizeof(float) +
         (rows_.size() + rows_by_start_.size()) * sizeof(Row) + sweep_.size() * sizeof(int);
}

SolveResult PersistentSolver::solve(int64_t limit) const {
  SolveResult result;
  result.limit = limit;
  if (limit > max_limit_) {
    throw std::invalid_argument("limit " + std::to_string(limit) +
                                " is above the table's maximum " + std::to_string(max_limit_) +
                                ": build the solver for a larger limit");
  }
  // The chain input a^0 is held throughout; the DP's memory excludes it (paper: C[1, L, M -
  // wa[0]]).
  const int m =
      static_cast<int>(std::max<int64_t>(limit, 0) / slot_) - static_cast<int>(sizes_.wa[0]);
  if (m < 0 || value(1, L_, m) >= kFeasible) {
    result.min_feasible_limit = minFeasibleLimit();
    result.message = "no persistent schedule fits in " + std::to_string(limit) + " bytes";
    if (result.min_feasible_limit > 0) {
      result.message +=
          "; the smallest limit that works is " + std::to_string(result.min_feasible_limit) +
          " bytes (at this table's resolution of " + std::to_string(slot_) + " bytes per slot)";
    }
    return result;
  }
  backtrack(1, L_, m, result.schedule);
  const SimulationResult sim = simulate(chain_, result.schedule);
  if (!sim.valid || !sim.complete || sim.peak > limit) {
    throw std::logic_error("persistent DP produced a schedule the simulator rejects: " +
                           sim.reason);
  }
  result.feasible = true;
  result.time = sim.time;
  result.peak = sim.peak;
  return result;
}

std::vector<CurvePoint> PersistentSolver::curve() const {
  std::vector<CurvePoint> points;
  float last = kInf;
  for (int m = 0; m + sizes_.wa[0] <= S_; ++m) {
    const float v = value(1, L_, m);
    if (v < kFeasible && v < last) {
      points.push_back({(m + sizes_.wa[0]) * slot_, static_cast<double>(v)});
      last = v;
    }
  }
  return points;
}

}  // namespace jitckpt::solver
