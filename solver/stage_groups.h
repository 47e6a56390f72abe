// Stage groups: consecutive stages that a schedule always runs together, so that the runtime can
// run each group as one stage. Takes a schedule over L stages and the terminal one, and which
// boundaries may go; returns the groups and the same schedule over them. Standard C++ only.
//
// Boundary k (between stages k and k+1) goes when every forward op of stage k is followed at once
// by one of stage k+1 and every forward op of stage k+1 follows one of stage k, as Fall(k)
// Fall(k+1), F∅(k) F∅(k+1) or Fck(k) F∅(k+1) (a^k is then never held between two ops), and every
// B(k+1) is followed at once by B(k) and every B(k) follows B(k+1). The group's op is the kind of
// its first stage's. With no limit (Fall(1) .. Fall(L), then B(L) .. B(1)) the chain is one group.
#pragma once

#include <vector>

#include "solver/schedule.h"

namespace jitckpt::solver {

struct StageGroups {
  // first[g] is the first stage of group g + 1 (1-based stages); group g + 1 ends where group
  // g + 2 begins, the last one at stage L.
  std::vector<int> first;
  Schedule schedule;  // over the groups 1..G and the terminal stage G + 1

  int size() const { return static_cast<int>(first.size()); }
};

// `schedule` is over stages 1..L and the terminal stage L + 1, which stays alone. `may_join[k]`
// (k = 1..L-1; size L) says whether stage k + 1 may join stage k at all; empty: every one may.
StageGroups groupStages(const Schedule& schedule, int L, const std::vector<bool>& may_join = {});

// The last stage of group g + 1 (0-based g) of a chain of L stages whose groups start at `first`.
inline int lastStageOf(const std::vector<int>& first, size_t g, int L) {
  return g + 1 < first.size() ? first[g + 1] - 1 : L;
}

// The schedule over the original stages that `groups.schedule` stands for.
Schedule expandGroups(const StageGroups& groups, int L);

}  // namespace jitckpt::solver
