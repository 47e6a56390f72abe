// ChainStages::stagesThatRunOnce: on CUDA with cuDNN, the stages with a recurrent layer that drops
// out between its layers (cuDNN draws that mask from a random state no saved generator restores).
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/stages.h"

namespace jitckpt::test {
namespace {

// One stage: `kind` over a two-layer stack, with its dropout and train flag as given (a constant,
// or "%s" for the stage's lifted scalar).
StageSpec recurrentStage(const std::string& kind, const std::string& dropout,
                         const std::string& train, size_t weight, size_t scalar) {
  StageSpec stage;
  stage.graph = std::make_shared<torch::jit::Graph>();
  const bool lstm = kind == "lstm";
  const std::string hidden = lstm ? "  %hs : Tensor[] = prim::ListConstruct(%h, %h)\n" : "";
  torch::jit::parseIR(
      "graph(%x : Tensor, %w : Tensor, %s : float):\n"
      "  %h : Tensor = aten::tanh(%x)\n" +
          hidden +
          "  %p : Tensor[] = prim::ListConstruct(%w, %w, %w, %w)\n"
          "  %bias : bool = prim::Constant[value=0]()\n"
          "  %layers : int = prim::Constant[value=2]()\n"
          "  %d : float = " +
          (dropout == "%s" ? "aten::mul(%s, %s)" : "prim::Constant[value=" + dropout + "]()") +
          "\n"
          "  %t : bool = prim::Constant[value=" +
          train +
          "]()\n"
          "  %no : bool = prim::Constant[value=0]()\n"
          "  %y : Tensor, %hy : Tensor" +
          (lstm ? ", %cy : Tensor" : "") + " = aten::" + kind + "(%x, " + (lstm ? "%hs" : "%h") +
          ", %p, %bias, %layers, %d, %t, %no, %no)\n"
          "  return (%y)\n",
      stage.graph.get());
  stage.num_activation_inputs = 1;
  stage.lifted = {weight, scalar};
  stage.label = kind;
  return stage;
}

TEST(StagesThatRunOnce, RecurrentDropoutOnCudaWithCudnn) {
  std::vector<LiftedSpec> lifted = {{"w", LiftedKind::Parameter}, {"p", LiftedKind::Scalar}};
  std::vector<StageSpec> specs = {
      recurrentStage("gru", "0.20000000000000001", "1", 0, 1),  // drops out
      recurrentStage("gru", "0.", "1", 0, 1),                   // dropout 0
      recurrentStage("lstm", "0.5", "0", 0, 1),                 // not training
      recurrentStage("lstm", "%s", "1", 0, 1),                  // dropout not known: may
  };
  for (const StageSpec& stage : specs) {
    int recurrent = 0;
    for (const torch::jit::Node* n : stage.graph->nodes())
      recurrent += n->kind().toQualString() == "aten::" + stage.label;
    ASSERT_EQ(recurrent, 1) << *stage.graph;
  }
  const ChainStages stages(specs, lifted);
  EXPECT_EQ(stages.stagesThatRunOnce(c10::Device(c10::kCUDA, 0)), (std::vector<int>{1, 4}));
  EXPECT_TRUE(stages.stagesThatRunOnce(c10::Device(c10::kCPU)).empty());
  // The native kernels draw from the CUDA generator, which a recomputation replays.
  const bool cudnn = at::globalContext().userEnabledCuDNN();
  at::globalContext().setUserEnabledCuDNN(false);
  EXPECT_TRUE(stages.stagesThatRunOnce(c10::Device(c10::kCUDA, 0)).empty());
  at::globalContext().setUserEnabledCuDNN(cudnn);
}

}  // namespace
}  // namespace jitckpt::test
