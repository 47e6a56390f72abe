// Stage groups (see stage_groups.h).
#include "solver/stage_groups.h"

#include <stdexcept>
#include <string>

namespace jitckpt::solver {
namespace {

// Whether forward op `next` of stage k + 1 may run as one op with `op` of stage k: the pair
// leaves what the first op alone leaves, plus a^{k+1} in place of a^k.
bool continues(OpKind op, OpKind next) {
  switch (op) {
    case OpKind::ForwardAll:
      return next == OpKind::ForwardAll;
    case OpKind::ForwardNone:
    case OpKind::ForwardCheck:
      return next == OpKind::ForwardNone;
    case OpKind::Backward:
      return false;
  }
  return false;
}

// Per boundary k = 1..L-1: whether every op of the schedule lets stages k and k + 1 run as one.
std::vector<bool> removableBoundaries(const Schedule& schedule, int L,
                                      const std::vector<bool>& may_join) {
  std::vector<bool> removable(static_cast<size_t>(L) + 1, false);
  for (int k = 1; k < L; ++k) removable[k] = may_join.empty() || may_join.at(k);
  const size_t n = schedule.size();
  auto at = [&](size_t i, int stage, bool backward) {
    return i < n && schedule[i].stage == stage &&
           (schedule[i].kind == OpKind::Backward) == backward;
  };
  for (size_t i = 0; i < n; ++i) {
    const Op& op = schedule[i];
    const int l = op.stage;
    if (l < 1 || l > L) continue;
    if (op.kind == OpKind::Backward) {
      if (l > 1 && !at(i + 1, l - 1, true)) removable[l - 1] = false;
      if (l < L && !(i > 0 && at(i - 1, l + 1, true))) removable[l] = false;
      continue;
    }
    if (l < L && !(at(i + 1, l + 1, false) && continues(op.kind, schedule[i + 1].kind)))
      removable[l] = false;
    if (l > 1 && !(i > 0 && at(i - 1, l - 1, false) && continues(schedule[i - 1].kind, op.kind)))
      removable[l - 1] = false;
  }
  return removable;
}

}  // namespace

StageGroups groupStages(const Schedule& schedule, int L, const std::vector<bool>& may_join) {
  if (L < 1) throw std::invalid_argument("groupStages: a chain has at least one stage");
  if (!may_join.empty() && may_join.size() != static_cast<size_t>(L))
    throw std::invalid_argument("groupStages: may_join has " + std::to_string(may_join.size()) +
                                " entries for " + std::to_string(L) + " stages");
  const std::vector<bool> removable = removableBoundaries(schedule, L, may_join);
  StageGroups groups;
  std::vector<int> group_of(static_cast<size_t>(L) + 2, 0);
  for (int l = 1; l <= L; ++l) {
    if (l == 1 || !removable[l - 1]) groups.first.push_back(l);
    group_of[l] = groups.size();
  }
  const int G = groups.size();
  group_of[L + 1] = G + 1;
  for (const Op& op : schedule) {
    if (op.stage < 1 || op.stage > L + 1)
      throw std::invalid_argument("groupStages: " + toString(op));
    const int g = group_of[op.stage];
    // A group's forward op stands where its first stage's op stood; its B where its first
    // stage's B stood (the last of the group's run of B).
    if (op.stage == L + 1 || op.stage == groups.first[g - 1])
      groups.schedule.push_back({op.kind, g});
  }
  return groups;
}

Schedule expandGroups(const StageGroups& groups, int L) {
  const int G = groups.size();
  Schedule out;
  for (const Op& op : groups.schedule) {
    if (op.stage == G + 1) {
      out.push_back({op.kind, L + 1});
      continue;
    }
    const int first = groups.first.at(op.stage - 1);
    const int last = lastStageOf(groups.first, static_cast<size_t>(op.stage - 1), L);
    if (op.kind == OpKind::Backward) {
      for (int k = last; k >= first; --k) out.push_back({OpKind::Backward, k});
      continue;
    }
    out.push_back({op.kind, first});
    const OpKind rest = op.kind == OpKind::ForwardAll ? OpKind::ForwardAll : OpKind::ForwardNone;
    for (int k = first + 1; k <= last; ++k) out.push_back({rest, k});
  }
  return out;
}

}  // namespace jitckpt::solver
