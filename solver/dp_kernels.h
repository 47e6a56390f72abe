// The persistent DP's inner loops and the memory its rows live in (persistent_dp.cpp builds the
// table with them). Takes rows of C[s,t,m] over the memory axis m; relaxes a cell's row with the
// candidates of its choices, in blocks of kBlock floats with AVX2 where the processor has it.
// Standard C++ with GCC's vector extension; no torch.
#pragma once

#include <cstddef>
#include <memory>

#include "solver/persistent_dp.h"

namespace jitckpt::solver::detail {

constexpr float kInf = 1e30f;
constexpr float kFeasible = 1e29f;   // values above this are infeasible (sums of kInf)
constexpr int kBlock = 16;           // floats relaxed together
constexpr int kRowPadding = kBlock;  // copies of a stored row's tail value after its middle

// The two candidate values of a cell, written once so that the DP and the backtracking compute
// bit-identical floats.
inline float allValue(float stage_time, float sub) { return stage_time + sub; }
inline float checkpointValue(float forward_time, float right, float left) {
  return (forward_time + right) + left;
}

// What split s' of cell (s,t) takes from s alone: filled once per s and block of columns and read
// by each of the block's cells (s,t), which add only what depends on t.
struct SplitBase {
  const float* left;  // stored middle of row (s, s'-1)
  int left_first, left_width;
  float left_min;
  int shift;  // kept(s-1, s'-1): the checkpoint a^{s'-1} in slots
  int sweep;  // peak of Fck(s), F∅(s+1..s'-1) without delta^t, in slots
  float c;    // forward time of Fck(s), F∅(s+1..s'-1)
};

// Every split s' = s+1..t of cell (s,t), in that order: right_rows[i] is row (s', t), bases[i]
// and gradients[i] what the split takes from s and from t, for s' = s + 1 + i; delta is wd[t] in
// slots. `out` (the row being built, S + 1 cells and kBlock more that hold -kInf) gets
// min(out[m], checkpointValue(...)) where a split can still lower it.
//
// A split s' of cell (s,t) relaxes out[m] = min(out[m], (c + R(m)) + Lf(m)) for m
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
void relaxSplits(float* out, const SplitBase* bases, const StoredRow* right_rows,
                 const int* gradients, int count, int delta, int S);

// C_all, and the stage alone (s = t): relaxed first, into an empty row; out[m] = min(out[m],
// c + sub[m - sub_offset]) on [lo, split_at), then the constant c + sub_min on [split_at, S].
void relaxAll(float* out, const float* sub, int sub_offset, float c, float sub_min, int lo,
              int split_at, int S);

// A chunk of `floats` floats for rows, on huge pages where the system offers them and the chunk
// fills some.
std::unique_ptr<float[], void (*)(void*)> allocateRowChunk(size_t floats);

}  // namespace jitckpt::solver::detail
