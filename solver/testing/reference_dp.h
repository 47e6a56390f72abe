// A plain implementation of the persistent DP's recurrence (persistent_dp.h, with its departures
// from the paper): every cell of the full table, every split at every memory slot, no pruning,
// no compression, no vectors. Takes a chain, the table's largest limit and its slot count, as
// PersistentSolver does; holds C[s,t,m] for every cell and gives the whole chain's time-memory
// curve. Tests hold the fast table to it, cell by cell, at sizes the exhaustive searches cannot
// reach. Torch-free; O(L^3 S) time and O(L^2 S) memory: for chains of up to a hundred stages.
#pragma once

#include <cstdint>
#include <vector>

#include "solver/costs.h"
#include "solver/persistent_dp.h"

namespace jitckpt::solver {

class ReferenceTable {
 public:
  ReferenceTable(const Costs& chain, int64_t max_limit, int slots, bool revolve_only = false);
  // C[s,t,m] for 1 <= s <= t <= L and 0 <= m <= slots(); above 1e29 where nothing fits.
  float value(int s, int t, int m) const;
  int slots() const { return S_; }
  std::vector<CurvePoint> curve() const;

 private:
  int L_ = 0, S_ = 0;
  int64_t slot_ = 1, input_slots_ = 0;
  std::vector<std::vector<std::vector<float>>> table_;  // [s][t][m]
};

}  // namespace jitckpt::solver
