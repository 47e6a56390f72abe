// Simulator of op sequences under Table 1 (see simulator.h for the exact rules).
#include "solver/simulator.h"

#include <algorithm>
#include <vector>

namespace jitckpt::solver {
namespace {

// The bytes of the activations held (lone or inside abar), each storage counted once per copy: a
// run of stage l makes new copies of what a^l does not take from a^{l-1}, and takes the copies
// a^{l-1} holds of the spans that go on through l (Costs::Span).
class HeldActivations {
 public:
  explicit HeldActivations(const Costs& chain) : chain_(chain), over_(chain.length() + 1) {
    const int L = chain.length();
    for (size_t i = 0; i < chain.spans.size(); ++i) {
      for (int l = chain.spans[i].first; l <= chain.spans[i].last; ++l)
        over_[l].push_back(static_cast<int>(i));
    }
    alone_.assign(L + 1, 0);
    made_.assign(L + 1, 0);
    for (int l = 0; l <= L; ++l) {
      alone_[l] = chain.wa[l];
      for (int i : over_[l]) alone_[l] -= chain.spans[i].bytes;
      made_[l] = alone_[l];
      for (int i : over_[l]) made_[l] += chain.spans[i].first == l ? chain.spans[i].bytes : 0;
    }
    copies_.resize(L + 1);
  }

  // a^l computed from the a^{l-1} held now (l = 0: the chain input).
  void compute(int l) {
    std::vector<int>& mine = copies_[l];
    mine.clear();
    for (int i : over_[l]) {
      const Span& span = chain_.spans[i];
      int copy;
      if (l > 0 && span.first < l) {  // a copy a^{l-1} holds (l > 0: GCC 16 cannot tell)
        const auto& theirs = copies_[l - 1];
        copy =
            theirs[std::find(over_[l - 1].begin(), over_[l - 1].end(), i) - over_[l - 1].begin()];
      } else {
        copy = static_cast<int>(references_.size());
        references_.push_back(0);
        span_of_.push_back(i);
      }
      if (references_[copy]++ == 0) bytes_ += span.bytes;
      mine.push_back(copy);
    }
    bytes_ += alone_[l];
  }

  void release(int l) {
    for (int copy : copies_[l]) {
      if (--references_[copy] == 0) bytes_ -= chain_.spans[span_of_[copy]].bytes;
    }
    copies_[l].clear();
    bytes_ -= alone_[l];
  }

  int64_t bytes() const { return bytes_; }
  // What a run of stage l makes of a^l: wa less what a^{l-1} passes on (Costs::passedBytes,
  // tabled here: the simulator asks it for every forward).
  int64_t made(int l) const { return made_[l]; }

 private:
  const Costs& chain_;
  std::vector<std::vector<int>> over_;    // per activation: the spans over it
  std::vector<int64_t> alone_;            // per activation: wa less its spans
  std::vector<int64_t> made_;             // per activation: see made()
  std::vector<std::vector<int>> copies_;  // per held activation: its copy of each span over it
  std::vector<int> references_;           // per copy: the held activations that hold it
  std::vector<int> span_of_;              // per copy: its span
  int64_t bytes_ = 0;
};

}  // namespace

SimulationResult simulate(const Costs& chain, const Schedule& schedule) {
  validate(chain);
  const int L = chain.length();
  std::vector<bool> a(L + 1, false), abar(L + 1, false), delta(L + 1, false);
  HeldActivations activations(chain);
  a[0] = true;
  activations.compute(0);
  delta[L] = true;
  // Besides the activations: gradients, and what abar^l saves beyond a^l.
  int64_t other = chain.wd[L];
  auto held = [&] { return other + activations.bytes(); };
  // Costs::held_output: the caller's copy of a^{L-1} is counted apart once no activation holds it.
  bool output_in_abar = false;

  SimulationResult result;
  result.peak = held();
  int forwards = 0;
  std::vector<bool> ran(L + 1, false);  // for Costs::runs_once
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
    if (op.kind != OpKind::Backward) {
      if (ran[l] && chain.runsOnce(l)) {
        return invalid(i, "stage " + std::to_string(l) +
                              " runs forward once (its random draws cannot be replayed)");
      }
      ran[l] = true;
    }
    switch (op.kind) {
      case OpKind::ForwardAll: {
        if (!input) return invalid(i, "its input a^" + std::to_string(l - 1) + " is not held");
        if (abar[l]) return invalid(i, "abar^" + std::to_string(l) + " is already held");
        // A lone a^l is replaced by the new run's, which is made before it goes.
        // abar^l's own part (Costs::abarOwnBytes): wabar less what a^{l-1} passes on.
        const int64_t abar_own = chain.wabar[l] - (chain.wa[l] - activations.made(l));
        result.peak = std::max(result.peak, held() + abar_own + chain.of[l]);
        if (a[l]) activations.release(l);
        activations.compute(l);
        other += chain.wabar[l] - chain.wa[l];
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
        result.peak =
            std::max(result.peak, held() + activations.made(l) + chain.noGradForwardOverhead(l));
        activations.compute(l);
        a[l] = true;
        if (op.kind == OpKind::ForwardNone && a[l - 1]) {  // a lone input is replaced
          activations.release(l - 1);
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
        result.peak = std::max(result.peak, held() + chain.backwardAddedBytes(l));
        other +=
            chain.wd[l - 1] - chain.wd[l] - (chain.wabar[l] - chain.wa[l]) + chain.gradientBytes(l);
        activations.release(l);
        delta[l] = false;
        abar[l] = false;
        if (l == L && chain.held_output > 0) {
          if (abar[l - 1])
            output_in_abar = true;  // apart from B(L-1) on
          else
            other += chain.held_output;
        }
        if (l == L - 1 && output_in_abar) {
          other += chain.held_output;
          output_in_abar = false;
        }
        if (a[l - 1]) {  // a lone a^{l-1} is consumed; abar^{l-1}, if held, stays
          activations.release(l - 1);
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
  if (result.complete) result.end_bytes = held();
  result.recomputations = std::max(0, forwards - L);
  return result;
}

}  // namespace jitckpt::solver
