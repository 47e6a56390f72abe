// Grouped stages: the chain as the executor runs it under one schedule, each group of
// consecutive stages that the schedule always runs together (solver/stage_groups.h) as one stage
// whose graph is theirs one after the other. Takes the stages and the schedule; returns the
// grouped stages and the schedule over them. Fewer stages cost the host less (a stage run and its
// bookkeeping each); the ops, their order and what the schedule holds between them stay the same.
#pragma once

#include <memory>
#include <vector>

#include "runtime/stages.h"
#include "solver/schedule.h"
#include "solver/stage_groups.h"

namespace jitckpt {

struct GroupedChain {
  std::shared_ptr<const ChainStages> stages;
  solver::Schedule schedule;  // over stages->size() stages and the terminal one
  std::vector<int> first;     // the first planned stage of each stage of `stages` (1-based)
};

// Ends the casts of one stage inside a group run under autocast: empties autocast's cache of cast
// weights (registered in register.cpp), as the end of a stage run apart does.
constexpr const char* kEndOfStageCasts = "jitckpt::end_of_stage_casts";

// Whether a group run keeps autocast's cache of cast weights to each of its stages: under
// autocast the plan counts each stage's casts while that stage runs only.
enum class StageCasts { Shared, EndWithEachStage };

// A stage joins the one before it unless it writes its activation input in place (it runs on a
// copy, which the joined graph would not make), or either holds kernels that depend on the
// autograd state and the schedule runs it without recording (F∅ and Fck record such a stage
// alone and drop its graph). With EndWithEachStage, only stages the schedule always records join
// (a run without grad casts its stage's weights up front, castWeightsAsRecording), and the
// joined graph ends each stage's casts before the next stage's ops. Returns `stages` itself where
// nothing joins.
GroupedChain groupStages(const std::shared_ptr<const ChainStages>& stages,
                         const solver::Schedule& schedule, StageCasts casts = StageCasts::Shared);

}  // namespace jitckpt
