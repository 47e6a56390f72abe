// A chain's sizes as the persistent DP charges them, in units of `unit` bytes rounded up and
// capped at `cap`: slots for the time-memory table (persistent_dp.h), bytes (unit 1) for the
// smallest peak (minimal_peak.h). The peak formulas live here once, so that both steps charge
// the same memory; persistent_dp.h lists where they depart from the paper. Standard C++ only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "solver/costs.h"

namespace jitckpt::solver {

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct ChainSizes {
  ChainSizes(const Costs& chain, int64_t unit, int64_t cap);

  // m_all(s,t): Fall(s), then B(s) beside the parameter gradients `gradients` of s+1..t. The
  // paper's max(wd[t] + wabar[s] + of[s], wd[s] + wabar[s] + ob[s]), and B(s) also holds the
  // delta^{s-1} it produces (simulator rule: Costs::backwardAddedBytes); abar^s costs what a^{s-1}
  // does not hold.
  int64_t allPeak(int s, int t, int64_t gradients) const {
    return std::min(cap, std::max(wd[t] + abar_own[s] + of[s],
                                  wd[s] + abar_own[s] + backward_added[s] + gradients));
  }
  // The forward run of C_ck from a^{s-1}, Fck(s) then F∅(s+1..k), peaks at the largest of
  // runStart(s) and runStep(s, j) for s < j <= k, beside delta^t; those forwards do not record
  // (of_nograd), and each makes only what its input does not pass on.
  int64_t runStart(int s) const { return new_a[s] + of_nograd[s]; }
  int64_t runStep(int s, int j) const { return kept(s - 1, j - 1) + new_a[j] + of_nograd[j]; }
  // A lone a^k held beside a^j (j < k), which it was computed from: what a^j does not hold.
  int64_t kept(int j, int k) const { return kept_[static_cast<size_t>(j) * (length + 1) + k]; }
  // What B(first..last) leave held to the end, in units (0 when first > last): the parameter
  // gradients of those stages, and the caller's copy of a^{L-1} (Costs::held_output) when last is
  // the terminal stage L.
  int64_t gradients(int first, int last) const;
  // What B(s) of C_all(s,t) holds beside it of s+1..t: gradients(s+1, t), but without the
  // caller's copy of a^{L-1} for s = L-1, t = L, where abar^{L-1} holds it until B(L-1) ends.
  int64_t allGradients(int s, int t) const {
    return s == length - 1 && t == length ? terminal_gradients : gradients(s + 1, t);
  }
  // The last split s' of C_ck(s,t) whose run s..s'-1 holds no stage of Costs::runs_once (each
  // would run forward again in (s, s'-1)): the first such stage from s on, capped at t.
  int lastSplit(int s, int t) const { return std::min(t, last_split_[static_cast<size_t>(s)]); }

  int64_t unit, cap;
  int length;  // L
  // wa, abar^l's own part (Costs::abarOwnBytes), what a run of stage l makes of a^l (wa less
  // what a^{l-1} passes on), wd, of, of_nograd, what B(l) adds beside delta^l
  // (Costs::backwardAddedBytes); each capped.
  std::vector<int64_t> wa, abar_own, new_a, wd, of, of_nograd, backward_added;
  std::vector<int64_t> gradient_bytes_before;  // [l]: what B(1..l-1) leave held, exact
  int64_t terminal_gradients = 0;              // wg[L] alone, in units

 private:
  std::vector<int64_t> kept_;    // (j, k) -> kept(j, k), (L+1) x (L+1), for j < k
  std::vector<int> last_split_;  // s -> the first stage of runs_once from s on, or L
};

}  // namespace jitckpt::solver
