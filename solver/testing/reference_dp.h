// A plain implementation of the persistent DP's recurrence (persistent_dp.h, with its departures
// from the paper): every cell of the full table, every split at every memory slot, no pruning,
// no compression, no vectors. Takes a chain, the table's largest limit and its slot count, as
// PersistentSolver does; returns the time-memory curve of the whole chain. Tests hold the fast
// table to it at sizes the exhaustive searches cannot reach. Torch-free; O(L^3 S) time and
// O(L^2 S) memory: for chains of up to a hundred stages.
#pragma once

#include <cstdint>
#include <vector>

#include "solver/costs.h"
#include "solver/persistent_dp.h"

namespace jitckpt::solver {

std::vector<CurvePoint> referenceCurve(const Costs& chain, int64_t max_limit, int slots,
                                       bool revolve_only = false);

}  // namespace jitckpt::solver
