// Simulator of op sequences under Table 1 (see simulator.h for the exact rules).
#include "solver/simulator.h"

#include <algorithm>
#include <vector>

namespace jitckpt::solver {

SimulationResult simulate(const Costs& chain, const Schedule& schedule) {
  validate(chain);
  const int L = chain.length();
  std::vector<bool> a(L + 1, false), abar(L + 1, false), delta(L + 1, false);
  a[0] = true;
  delta[L] = true;
  int64_t held = chain.wa[0] + chain.wd[L];

  SimulationResult result;
  result.peak = held;
  int forwards = 0;
  auto invalid = [&](size_t index, const std::string& why) {
    result.valid = false;
    result.first_invalid_op = static_cast<int>(index);
    result.reason = toString(schedule[index]) + ": " + why;
    return result;
  };

  for (size_t i = 0; i < schedule.size(); ++i) {
    const Op& op = schedule[i];
    const int l = op.stage;
    if (l < 1 || l > L) return invalid(i, "stage out of range 1.." + std::to_string(L));
    if (delta[0]) return invalid(i, "the sequence is already complete");
    const bool input = a[l - 1] || abar[l - 1];
    switch (op.kind) {
      case OpKind::ForwardAll: {
        if (!input) return invalid(i, "its input a^" + std::to_string(l - 1) + " is not held");
        if (abar[l]) return invalid(i, "abar^" + std::to_string(l) + " is already held");
        result.peak = std::max(result.peak, held + chain.abarOwnBytes(l) + chain.of[l]);
        held += chain.abarOwnBytes(l) - (a[l] ? chain.wa[l] : 0);
        a[l] = false;
        abar[l] = true;
        result.time += chain.uf[l];
        ++forwards;
        break;
      }
      case OpKind::ForwardCheck:
      case OpKind::ForwardNone: {
        if (!input) return invalid(i, "its input a^" + std::to_string(l - 1) + " is not held");
        if (a[l] || abar[l]) return invalid(i, "a^" + std::to_string(l) + " is already held");
        result.peak = std::max(result.peak, held + chain.wa[l] + chain.noGradForwardOverhead(l));
        held += chain.wa[l];
        a[l] = true;
        if (op.kind == OpKind::ForwardNone && a[l - 1]) {  // a lone input is replaced
          held -= chain.wa[l - 1];
          a[l - 1] = false;
        }
        result.time += chain.noGradForward(l);
        ++forwards;
        break;
      }
      case OpKind::Backward: {
        if (!delta[l]) return invalid(i, "delta^" + std::to_string(l) + " is not held");
        if (!abar[l]) return invalid(i, "abar^" + std::to_string(l) + " is not held");
        if (!input) return invalid(i, "a^" + std::to_string(l - 1) + " is not held");
        result.peak = std::max(result.peak, held + chain.wd[l - 1] + chain.ob[l]);
        held += chain.wd[l - 1] - chain.wd[l] - chain.abarOwnBytes(l) + chain.gradientBytes(l);
        delta[l] = false;
        abar[l] = false;
        if (a[l - 1]) {  // a lone a^{l-1} is consumed; abar^{l-1}, if held, stays
          held -= chain.wa[l - 1];
          a[l - 1] = false;
        }
        delta[l - 1] = true;
        result.time += chain.ub[l];
        break;
      }
    }
  }
  result.valid = true;
  result.complete = delta[0];
  result.recomputations = std::max(0, forwards - L);
  return result;
}

}  // namespace jitckpt::solver
