// Optimal persistent DP (Theorem 1, Algorithms 1-2). Takes a Costs and the largest limit M;
// builds C[s,t,m] once (m in slots of ceil(M/S) bytes) and answers any limit <= M by
// backtracking, recomputing the argmins instead of storing them.
//
// Speed (ResNet-1001, L = 339, S = 500: 0.16-0.20 s on one core of the 2-core VMs,
// bench/solver_bench.cpp): the memory axis of a row is contiguous and every relaxation is a shifted
// add/min over m in blocks of 16 floats; rows are stored compressed (see StoredRow in the header),
// and row-major as well as column-major so that both operands of a split are read in order; cells
// are filled in blocks of columns, so that the rows those cells read stay in the core's caches
// (measured: 4 columns fastest on Intel VMs with 2 MB of L2 per core, 16 and 32 on an AMD EPYC VM
// with 1 MB, where 4 was 20% slower; 8, between the two, takes 7% less time than 16 on an Intel
// VM); rows live on huge pages where the system has them; and a split s' is relaxed only over the m
// where it can still win: its value is at least the no-grad forward time of s..s'-1 + min C[s',t] +
// min C[s,s'-1], and the row being built is non-increasing in m, so the relaxation stops at the
// first block where the row is already at or below that bound (exact, also in float arithmetic).
// The time goes into the rows' memory and the relaxations' exits, not into arithmetic: of the
// blocks relaxed, about one in five lowers a cell.
#include "solver/persistent_dp.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#ifdef __linux__
#include <sys/mman.h>
#endif
#include <stdexcept>

#include "solver/baselines.h"
#include "solver/simulator.h"

// The 8-float vectors below pass only between always-inlined helpers: no ABI is involved.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace jitckpt::solver {
namespace {

constexpr float kInf = 1e30f;
constexpr float kFeasible = 1e29f;  // values above this are infeasible (sums of kInf)
constexpr int kColumnBlock = 8;     // columns t filled together (cache blocking)

// The two candidate values of a cell, written once so that the DP and the backtracking compute
// bit-identical floats.
inline float allValue(float stage_time, float sub) { return stage_time + sub; }
inline float checkpointValue(float forward_time, float right, float left) {
  return (forward_time + right) + left;
}

// The hot loop. A split s' of cell (s,t) relaxes out[m] = min(out[m], (c + R(m)) + Lf(m)) for m
// from lo on, where R(m) is the right row (s',t) read at m - right_offset and Lf(m) the left row
// (s, s'-1) at m - left_offset. Both are non-increasing in m, so the candidate is too, and it
// never goes below bound = (c + min R) + min Lf, the value of both rows' constant tails; `out` is
// non-increasing as well, so the relaxation stops at the first block that starts where out[m] <=
// bound: nothing from there on can change. A stored row carries kRowPadding copies of its tail
// value after its stored middle, so a read pointer clamped to the middle's end reads the tail: a
// block reads true values wherever it starts. `out` has kBlock cells past S that hold -kInf, so
// the same exit test ends a run that passes S (a block that reaches them leaves them -kInf; they
// are never stored). Whole blocks, with no scalar remainder and no separate loops for the rows'
// tails, keep each split to one loop with one exit: the time goes into waiting on the rows'
// memory and on that exit, not into arithmetic.
}  // namespace

// What split s' of cell (s,t) takes from s alone: filled once per s and block of columns and read
// by each of the block's cells (s,t), which add only what depends on t.
struct detail::SplitBase {
  const float* left;  // stored middle of row (s, s'-1)
  int left_first, left_width;
  float left_min;
  int shift;  // kept(s-1, s'-1): the checkpoint a^{s'-1} in slots
  int sweep;  // peak of Fck(s), F∅(s+1..s'-1) without delta^t, in slots
  float c;    // forward time of Fck(s), F∅(s+1..s'-1)
};

namespace {

using detail::SplitBase;
using detail::StoredRow;
constexpr int kBlock = 16;
constexpr int kRowPadding = kBlock;
// AVX2 where the processor has it (an AVX-512 clone measured no faster on this loop).
#define JITCKPT_CLONES __attribute__((target_clones("avx2", "default")))

// Sixteen floats as two halves of GCC's 8-float vector extension (an AVX2 register each, two SSE
// halves in the default clone); the compiler does not vectorize early-exit loops on its own. The
// helpers are always inlined, so that each clone computes them with its own instructions: called
// (unoptimized builds), a helper compiled for the default target would pass the vectors another
// way than the AVX2 clone expects.
typedef float Vec8 __attribute__((vector_size(32)));
struct Vec16 {
  Vec8 low, high;
};
#define JITCKPT_INLINE inline __attribute__((always_inline))
JITCKPT_INLINE Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v.low, p, sizeof v.low);
  std::memcpy(&v.high, p + 8, sizeof v.high);
  return v;
}
JITCKPT_INLINE void store16(float* p, const Vec16& v) {
  std::memcpy(p, &v.low, sizeof v.low);
  std::memcpy(p + 8, &v.high, sizeof v.high);
}
JITCKPT_INLINE Vec8 min8(Vec8 a, Vec8 b) { return a < b ? a : b; }

// Every split s' = s+1..t of cell (s,t), in that order: right_rows[i] is row (s', t), bases[i]
// and gradients[i] what the split takes from s and from t, for s' = s + 1 + i. Each split's
// fields are read and its run relaxed in one pass: built into an array first and read back by a
// second loop, they cost a 48-byte store and load per split, about 4% of a table.
JITCKPT_CLONES void relaxSplits(float* __restrict out, const SplitBase* __restrict bases,
                                const StoredRow* __restrict right_rows,
                                const int* __restrict gradients, int count, int delta, int S) {
  for (int i = 0; i < count; ++i) {
    const SplitBase& b = bases[i];
    const StoredRow right = right_rows[i];
    const int right_offset = b.shift + right.first;       // a^{s'-1} beside (s', t)
    const int left_offset = gradients[i] + b.left_first;  // (s, s'-1) beside the gradients of s'..t
    const int lo = std::max({std::min(delta + b.sweep, S + 1), right_offset, left_offset});
    if (lo > S) continue;
    const Vec8 c = Vec8{} + b.c;
    const float bound = checkpointValue(b.c, right.min, b.left_min);
    const float* r_end = right.data + (right.end - right.first);
    const float* l_end = b.left + b.left_width;
    const float* r = std::min(right.data + (lo - right_offset), r_end);
    const float* l = std::min(b.left + (lo - left_offset), l_end);
    for (float* o = out + lo; *o > bound; o += kBlock) {
      const Vec16 rv = load16(r);
      const Vec16 lv = load16(l);
      const Vec16 ov = load16(o);
      // checkpointValue's order of sums, so that backtracking finds the same floats
      store16(o, {min8((c + rv.low) + lv.low, ov.low), min8((c + rv.high) + lv.high, ov.high)});
      r = std::min(r + kBlock, r_end);
      l = std::min(l + kBlock, l_end);
    }
  }
}

// C_all, and the stage alone (s = t): relaxed first, into an empty row; out[m] = min(out[m],
// c + sub[m - sub_offset]) on [lo, split_at), then the constant c + sub_min on [split_at, S].
JITCKPT_CLONES void relaxAll(float* __restrict out, const float* __restrict sub, int sub_offset,
                             float c, float sub_min, int lo, int split_at, int S) {
  for (int m = lo; m < split_at; ++m) {
    const float v = allValue(c, sub[m - sub_offset]);
    out[m] = v < out[m] ? v : out[m];
  }
  const float tail = allValue(c, sub_min);
  for (int m = std::max(lo, split_at); m <= S; ++m) out[m] = tail < out[m] ? tail : out[m];
}

constexpr size_t kHugePage = size_t{2} << 20;
// A chunk of rows, on huge pages where the system offers them and the chunk fills some: a large
// table is tens of MB written once, and faulting it in 4 KB pages took an eighth of its build.
std::unique_ptr<float[], void (*)(void*)> allocateChunk(size_t floats) {
  const size_t bytes = (floats * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage;
  if (floats * sizeof(float) < kHugePage) {
    void* memory = std::malloc(floats * sizeof(float));
    if (memory == nullptr) throw std::bad_alloc();
    return {static_cast<float*>(memory), std::free};
  }
  void* memory = std::aligned_alloc(kHugePage, bytes);
  if (memory == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(memory, bytes, MADV_HUGEPAGE);  // a hint: without it, ordinary pages
#endif
  return {static_cast<float*>(memory), std::free};
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
  for (int t0 = 1; t0 <= L_; t0 += kColumnBlock) {
    const int t1 = std::min(L_, t0 + kColumnBlock - 1);
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
    if (emem <= S_) relaxAll(out, nullptr, 0, stage_time, 0.0f, emem, emem, S_);
  } else {
    if (!revolve_only_) {  // C_all: Fall(s), solve (s+1, t) beside abar^s, B(s)
      const Row& sub = rows_[rowIndex(s + 1, t)];
      const int shift = static_cast<int>(sizes_.abar_own[s]);
      const int lo = std::max(emem, shift + sub.first);
      const int split_at = std::min(S_ + 1, std::max(lo, shift + sub.end));  // sub's constant tail
      if (lo <= S_)
        relaxAll(out, sub.data, shift + sub.first, stage_time, sub.min, lo, split_at, S_);
    }
    // C_ck: Fck(s), F∅(s+1..s'-1), solve (s', t) beside a^{s'-1} (what a^{s-1} does not hold of
    // it), then (s, s'-1) beside the parameter gradients of s'..t.
    relaxSplits(out, bases.data(), &rows_[rowIndex(s + 1, t)],
                &gradient_slots_[static_cast<size_t>(t) * (L_ + 2) + s + 1], t - s,
                static_cast<int>(sizes_.wd[t]), S_);
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
    chunks_.push_back(allocateChunk(chunk_size_));
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
  for (int split = s + 1; split <= t; ++split) {
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

namespace {

// The largest limit of the table that optimalCurve builds.
int64_t curveMaxLimit(int64_t unconstrained_peak) {
  return std::max<int64_t>(unconstrained_peak + unconstrained_peak / 4, 1);
}

SolveResult solveWithFallback(const Costs& chain, int64_t limit, int slots, bool revolve_only) {
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
