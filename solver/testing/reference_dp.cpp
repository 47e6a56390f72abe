// Plain persistent DP (see reference_dp.h). The same float arithmetic as the fast table (the
// candidates' sums in the same order), so that the two agree bit for bit.
#include "solver/testing/reference_dp.h"

#include <algorithm>

#include "solver/chain_sizes.h"  // ceilDiv only: the memory terms below are the reference's own

namespace jitckpt::solver {
namespace {

constexpr float kInf = 1e30f;
constexpr float kFeasible = 1e29f;

}  // namespace

ReferenceTable::ReferenceTable(const Costs& chain, int64_t max_limit, int slots,
                               bool revolve_only) {
  validate(chain);
  const int L = L_ = chain.length();
  const int64_t slot = slot_ = std::max<int64_t>(1, ceilDiv(max_limit, slots));
  const int S = S_ = static_cast<int>(max_limit / slot);
  auto toSlots = [&](int64_t bytes) { return std::min<int64_t>(ceilDiv(bytes, slot), S + 1); };
  auto wa = [&](int l) { return toSlots(chain.wa[l]); };
  auto wd = [&](int l) { return toSlots(chain.wd[l]); };
  // What B(first..last) leave held: parameter gradients, and the caller's copy of a^{L-1} once
  // B(L) has run (Costs::held_output) unless `output_in_abar`: abar^{L-1} holds it until B(L-1).
  auto gradients = [&](int first, int last, bool output_in_abar = false) {
    int64_t bytes = 0;
    for (int l = first; l <= last; ++l) bytes += chain.gradientBytes(l);
    if (first <= last && last == L && !output_in_abar) bytes += chain.held_output;
    return toSlots(bytes);
  };
  // What a run of stage l makes of a^l, and a lone a^k beside a^j, which it was computed from.
  auto made = [&](int l) { return toSlots(chain.wa[l] - chain.passedBytes(l)); };
  auto kept = [&](int j, int k) { return toSlots(chain.wa[k] - chain.sharedBytes(j, k)); };
  // Fck(s), F∅(s+1..last) beside a^{s-1} and delta^t.
  auto sweep = [&](int s, int last, int t) {
    int64_t peak = made(s) + toSlots(chain.noGradForwardOverhead(s));
    for (int j = s + 1; j <= last; ++j)
      peak = std::max(peak, kept(s - 1, j - 1) + made(j) + toSlots(chain.noGradForwardOverhead(j)));
    return wd(t) + std::min<int64_t>(peak, S + 1);
  };
  // No-grad forward times of stages s..last, as a difference of prefix sums.
  std::vector<double> prefix(L + 1, 0.0);
  for (int l = 1; l <= L; ++l) prefix[l] = prefix[l - 1] + chain.noGradForward(l);
  auto forwardTime = [&](int s, int last) {
    return static_cast<float>(prefix[last] - prefix[s - 1]);
  };
  input_slots_ = wa(0);
  auto& table = table_;  // table[s][t][m], m = 0..S
  table.assign(L + 2, std::vector<std::vector<float>>(L + 1, std::vector<float>(S + 1, kInf)));
  for (int length = 0; length < L; ++length) {
    for (int s = 1; s + length <= L; ++s) {
      const int t = s + length;
      std::vector<float>& out = table[s][t];
      const int64_t abar = toSlots(chain.abarOwnBytes(s));
      const int64_t emem = std::max(
          wd(t) + abar + toSlots(chain.of[s]),
          wd(s) + abar + toSlots(chain.backwardAddedBytes(s)) + gradients(s + 1, t, s == L - 1));
      const float stage_time = static_cast<float>(chain.uf[s] + chain.ub[s]);
      if (s == t) {
        for (int64_t m = emem; m <= S; ++m) out[m] = stage_time;
        continue;
      }
      for (int64_t m = std::max(emem, abar); !revolve_only && m <= S; ++m) {
        const float sub = table[s + 1][t][m - abar];
        if (sub < kFeasible) out[m] = std::min(out[m], stage_time + sub);
      }
      for (int split = s + 1; split <= t; ++split) {
        const int64_t shift = kept(s - 1, split - 1), left_shift = gradients(split, t);
        const float forward_time = forwardTime(s, split - 1);
        for (int64_t m = std::max({sweep(s, split - 1, t), shift, left_shift}); m <= S; ++m) {
          const float right = table[split][t][m - shift];
          const float left = table[s][split - 1][m - left_shift];
          if (right < kFeasible && left < kFeasible)
            out[m] = std::min(out[m], (forward_time + right) + left);
        }
      }
    }
  }
}

float ReferenceTable::value(int s, int t, int m) const { return table_[s][t][m]; }

std::vector<CurvePoint> ReferenceTable::curve() const {
  std::vector<CurvePoint> points;
  float last = kInf;
  for (int m = 0; m + input_slots_ <= S_; ++m) {
    const float v = table_[1][L_][m];
    if (v < kFeasible && v < last) {
      points.push_back({(m + input_slots_) * slot_, static_cast<double>(v)});
      last = v;
    }
  }
  return points;
}

}  // namespace jitckpt::solver
