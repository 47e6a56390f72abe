// groupStages (runtime/grouped_stages.h) on three small stages: which stages join under a
// schedule, and where a group run under autocast ends each stage's casts.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/grouped_stages.h"

namespace jitckpt::test {
namespace {

// Three stages y = tanh(x @ w), each reading its own lifted weight.
std::shared_ptr<const ChainStages> threeStages() {
  std::vector<StageSpec> specs;
  std::vector<LiftedSpec> lifted;
  for (int l = 0; l < 3; ++l) {
    StageSpec stage;
    stage.graph = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR(
        "graph(%x : Tensor, %w : Tensor):\n"
        "  %h : Tensor = aten::matmul(%x, %w)\n"
        "  %y : Tensor = aten::tanh(%h)\n"
        "  return (%y)\n",
        stage.graph.get());
    stage.num_activation_inputs = 1;
    stage.lifted = {static_cast<size_t>(l)};
    stage.label = "layer" + std::to_string(l);
    specs.push_back(stage);
    lifted.push_back({"w" + std::to_string(l), LiftedKind::Parameter});
  }
  return std::make_shared<const ChainStages>(specs, lifted);
}

int endsOfStageCasts(const torch::jit::Graph& graph) {
  int count = 0;
  for (const torch::jit::Node* n : graph.nodes())
    count += n->kind() == c10::Symbol::fromQualString(kEndOfStageCasts);
  return count;
}

// No checkpointing: every stage recorded, so all three join either way.
const char* kRecordEveryStage = "Fall(1) Fall(2) Fall(3) Fall(4) B(4) B(3) B(2) B(1)";
// Stage 1 is checkpointed and stage 2 recomputed without grad before both are recorded again.
const char* kRecomputeTheFirstTwo =
    "Fck(1) F∅(2) Fall(3) Fall(4) B(4) B(3) Fall(1) Fall(2) B(2) B(1)";

TEST(GroupedStages, ARecordedChainIsOneGroupEndingEachStagesCastsUnderAutocast) {
  const auto stages = threeStages();
  const auto schedule = solver::parseSchedule(kRecordEveryStage);
  const GroupedChain shared = groupStages(stages, schedule, StageCasts::Shared);
  ASSERT_EQ(shared.stages->size(), 1);
  EXPECT_EQ(endsOfStageCasts(*shared.stages->stage(1).graph), 0);
  const GroupedChain apart = groupStages(stages, schedule, StageCasts::EndWithEachStage);
  ASSERT_EQ(apart.stages->size(), 1);
  EXPECT_EQ(solver::toString(apart.schedule), "Fall(1) Fall(2) B(2) B(1)");
  // One end between each two stages; the runner ends the last stage's casts.
  EXPECT_EQ(endsOfStageCasts(*apart.stages->stage(1).graph), 2);
  EXPECT_EQ(apart.stages->stage(1).lifted, (std::vector<size_t>{0, 1, 2}));
}

TEST(GroupedStages, StagesRunWithoutGradJoinOnlyWithSharedCasts) {
  const auto stages = threeStages();
  const auto schedule = solver::parseSchedule(kRecomputeTheFirstTwo);
  const GroupedChain shared = groupStages(stages, schedule, StageCasts::Shared);
  EXPECT_EQ(shared.first, (std::vector<int>{1, 3}));
  // Under autocast a run without grad casts its stage's weights up front: stages 1 and 2 stay
  // apart, and nothing joins.
  const GroupedChain apart = groupStages(stages, schedule, StageCasts::EndWithEachStage);
  EXPECT_EQ(apart.first, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(apart.stages.get(), stages.get());
}

TEST(GroupedStages, AStageThatCopiesItsGradientsIsTheFirstOfItsGroup) {
  // B(2) copied a parameter's gradient to lay it out as the parameter: that copy comes when the
  // engine call ends, so stage 2 does not join stage 1 below it (stage 3 may join stage 2), and
  // the group it heads says so for the runs of B.
  const auto stages = threeStages();
  stages->setCopiesParameterGradients(2);
  const GroupedChain grouped =
      groupStages(stages, solver::parseSchedule(kRecordEveryStage), StageCasts::Shared);
  EXPECT_EQ(grouped.first, (std::vector<int>{1, 2}));
  EXPECT_FALSE(grouped.stages->copiesParameterGradients(1));
  EXPECT_TRUE(grouped.stages->copiesParameterGradients(2));
}

}  // namespace
}  // namespace jitckpt::test
