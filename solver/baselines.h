// Baseline schedules in the same vocabulary: no checkpointing, periodic segments exactly as
// PyTorch's checkpoint_sequential runs them, and the revolve-style schedule (only a^l
// checkpoints, an Fall before every B; see solveRevolve in persistent_dp.h). Torch-free.
#pragma once

#include "solver/costs.h"
#include "solver/schedule.h"

namespace jitckpt::solver {

// Fall(1..L) then B(L..1): what autograd does without checkpointing.
Schedule noCheckpointSchedule(const Costs& chain);
// The same for a chain of `length` stages, the terminal one included.
Schedule noCheckpointScheduleOfLength(int length);

// checkpoint_sequential(functions, segments): the first segments-1 segments have
// floor(n / segments) stages and run without saving (only their input is kept); the last segment
// takes the rest and saves everything. Backward: the last segment's B, then each earlier segment
// recomputed with Fall from its input, then its B. `segmented_stages` (default: all L) is the
// number of leading stages that are segmented; stages after them join the last segment (used for
// a model chain's zero-cost terminal stage). Throws when segments < 1 or > segmented_stages.
Schedule periodicSchedule(const Costs& chain, int segments, int segmented_stages = -1);

}  // namespace jitckpt::solver
