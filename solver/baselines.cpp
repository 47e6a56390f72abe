// Baseline schedules: none and periodic (checkpoint_sequential).
#include "solver/baselines.h"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace jitckpt::solver {

Schedule noCheckpointSchedule(const Costs& chain) {
  return noCheckpointScheduleOfLength(chain.length());
}

Schedule noCheckpointScheduleOfLength(int L) {
  Schedule schedule;
  for (int l = 1; l <= L; ++l) schedule.push_back({OpKind::ForwardAll, l});
  for (int l = L; l >= 1; --l) schedule.push_back({OpKind::Backward, l});
  return schedule;
}

Schedule periodicSchedule(const Costs& chain, int segments, int segmented_stages) {
  const int L = chain.length();
  const int n = segmented_stages < 0 ? L : segmented_stages;
  if (n < 1 || n > L)
    throw std::invalid_argument("periodic schedule: segmented stages out of range");
  if (segments < 1 || segments > n) {
    throw std::invalid_argument("periodic schedule: " + std::to_string(segments) +
                                " segments for " + std::to_string(n) + " stages; use 1 to " +
                                std::to_string(n) + " segments");
  }
  const int size = n / segments;
  std::vector<std::pair<int, int>> ranges;  // [first, last] stages of each segment
  for (int i = 0; i + 1 < segments; ++i) ranges.push_back({i * size + 1, (i + 1) * size});
  ranges.push_back({(segments - 1) * size + 1, L});

  Schedule schedule;
  for (size_t i = 0; i + 1 < ranges.size(); ++i) {
    schedule.push_back({OpKind::ForwardCheck, ranges[i].first});
    for (int l = ranges[i].first + 1; l <= ranges[i].second; ++l)
      schedule.push_back({OpKind::ForwardNone, l});
  }
  for (size_t i = ranges.size(); i-- > 0;) {
    for (int l = ranges[i].first; l <= ranges[i].second; ++l)
      schedule.push_back({OpKind::ForwardAll, l});
    for (int l = ranges[i].second; l >= ranges[i].first; --l)
      schedule.push_back({OpKind::Backward, l});
  }
  return schedule;
}

}  // namespace jitckpt::solver
