// Smallest persistent peak (see minimal_peak.h). P(s,t), the least memory that solves (s,t)
// beside delta^t (a^{s-1} held, outside it, as in the table), follows the table's rows' first
// finite slot at one byte per slot (gradients(s+1..t) in m_all: ChainSizes::allGradients):
//   P(s,s) = m_all(s,s)
//   P(s,t) = min( max(m_all(s,t), abar_own[s] + P(s+1,t)),                      C_all
//                 min_{s<s'<=t} max(run(s,s'-1) + wd[t], kept(s-1,s'-1) + P(s',t),
//                                   gradients(s'..t) + P(s,s'-1)) )             C_ck
// and the limit is P(1,L) + wa[0]. C_ck's splits stop at the first stage from s on that runs
// forward once (Costs::runs_once); where nothing is left (revolve-style), P is kNone.
#include "solver/minimal_peak.h"

#include <limits>
#include <stdexcept>
#include <vector>

#include "solver/chain_sizes.h"
#include "solver/simulator.h"

namespace jitckpt::solver {
namespace {

constexpr int kAll = 0;  // choice(s,t): C_all; otherwise the split s'
constexpr int64_t kNone = std::numeric_limits<int64_t>::max() / 4;  // no schedule

class MinimalPeakTable {
 public:
  MinimalPeakTable(const Costs& chain, bool revolve_only)
      : chain_(chain),
        L_(chain.length()),
        sizes_(chain, 1, std::numeric_limits<int64_t>::max() / 8),
        revolve_only_(revolve_only),
        peak_(cells(), 0),
        time_(cells(), 0),
        choice_(cells(), kAll) {
    prefix_uf_.assign(L_ + 1, 0.0);
    for (int l = 1; l <= L_; ++l) prefix_uf_[l] = prefix_uf_[l - 1] + chain_.noGradForward(l);
    for (int t = 1; t <= L_; ++t) {
      for (int s = t; s >= 1; --s) fill(s, t);
    }
  }

  // -1 where no schedule exists.
  int64_t limit() const {
    const int64_t peak = peak_[at(1, L_)];
    return peak >= kNone ? -1 : sizes_.wa[0] + peak;
  }

  void schedule(int s, int t, Schedule& out) const {
    const int split = choice_[at(s, t)];
    if (split == kAll) {
      out.push_back({OpKind::ForwardAll, s});
      if (s < t) schedule(s + 1, t, out);
      out.push_back({OpKind::Backward, s});
      return;
    }
    out.push_back({OpKind::ForwardCheck, s});
    for (int j = s + 1; j < split; ++j) out.push_back({OpKind::ForwardNone, j});
    schedule(split, t, out);
    schedule(s, split - 1, out);
  }

 private:
  size_t cells() const { return static_cast<size_t>(L_ + 1) * (L_ + 1); }
  size_t at(int s, int t) const { return static_cast<size_t>(s) * (L_ + 1) + t; }
  double stageTime(int s) const { return chain_.uf[s] + chain_.ub[s]; }

  // The smallest peak, and among equal peaks the least time.
  void consider(size_t cell, int64_t peak, double time, int choice, bool& any) {
    if (any && (peak > peak_[cell] || (peak == peak_[cell] && time >= time_[cell]))) return;
    any = true;
    peak_[cell] = peak;
    time_[cell] = time;
    choice_[cell] = choice;
  }

  void fill(int s, int t) {
    const size_t cell = at(s, t);
    bool any = false;
    if (s == t) {
      consider(cell, sizes_.allPeak(s, s, 0), stageTime(s), kAll, any);
      return;
    }
    if (!revolve_only_) {
      const int64_t peak = std::max(sizes_.allPeak(s, t, sizes_.allGradients(s, t)),
                                    sizes_.abar_own[s] + peak_[at(s + 1, t)]);
      consider(cell, std::min(peak, kNone), stageTime(s) + time_[at(s + 1, t)], kAll, any);
    }
    int64_t run = sizes_.runStart(s);
    for (int split = s + 1; split <= sizes_.lastSplit(s, t); ++split) {
      if (split > s + 1) run = std::max(run, sizes_.runStep(s, split - 1));
      const int64_t peak =
          std::max({run + sizes_.wd[t], sizes_.kept(s - 1, split - 1) + peak_[at(split, t)],
                    sizes_.gradients(split, t) + peak_[at(s, split - 1)]});
      const double time = (prefix_uf_[split - 1] - prefix_uf_[s - 1]) + time_[at(split, t)] +
                          time_[at(s, split - 1)];
      consider(cell, std::min(peak, kNone), time, split, any);
    }
    if (!any) peak_[cell] = kNone;
  }

  const Costs& chain_;
  int L_;
  ChainSizes sizes_;
  bool revolve_only_;
  std::vector<int64_t> peak_;
  std::vector<double> time_;
  std::vector<int> choice_;
  std::vector<double> prefix_uf_;
};

}  // namespace

MinimalPeak minimalPeak(const Costs& chain, bool revolve_only) {
  validate(chain);
  const MinimalPeakTable table(chain, revolve_only);
  MinimalPeak result;
  if (table.limit() < 0) {
    result.limit = -1;
    return result;
  }
  table.schedule(1, chain.length(), result.schedule);
  const SimulationResult sim = simulate(chain, result.schedule);
  if (!sim.valid || !sim.complete || sim.peak != table.limit()) {
    throw std::logic_error("minimal peak: the schedule's simulated peak " +
                           std::to_string(sim.peak) + " is not the recurrence's " +
                           std::to_string(table.limit()) + (sim.valid ? "" : ": " + sim.reason));
  }
  result.limit = sim.peak;
  result.time = sim.time;
  return result;
}

}  // namespace jitckpt::solver
