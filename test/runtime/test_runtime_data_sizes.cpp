// findStagesSizedByData: which stage graphs make a tensor whose size comes from values. Each case
// is a chain of stages over activations (the first stage's %x: the chain's input) and the same
// lifted values: a parameter %w, a buffer %b and a side value %m (a mask the model computed
// before the chain).
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data_sizes.h"

namespace jitckpt::test {
namespace {

const std::vector<LiftedSpec> kLifted = {
    {"w", LiftedKind::Parameter}, {"b", LiftedKind::Buffer}, {"m", LiftedKind::Side}};

// Each stage: its activation inputs ("%x : Tensor, %c : Tensor") and its body.
std::vector<int> stagesSizedByData(
    const std::vector<std::pair<std::string, std::string>>& activations_and_bodies) {
  std::vector<StageSpec> stages;
  for (const auto& [activations, body] : activations_and_bodies) {
    StageSpec stage;
    stage.graph = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR(
        "graph(" + activations + ", %w : Tensor, %b : Tensor, %m : Tensor):\n" + body,
        stage.graph.get());
    stage.num_activation_inputs = stage.graph->inputs().size() - kLifted.size();
    stage.lifted = {0, 1, 2};
    stages.push_back(std::move(stage));
  }
  return findStagesSizedByData(stages, kLifted);
}

bool sizedByData(const std::string& body) {
  return !stagesSizedByData({{"%x : Tensor", body}}).empty();
}

}  // namespace

TEST(DataSizes, OpsThatSizeTheirOutputByValues) {
  EXPECT_TRUE(sizedByData("  %y : Tensor = aten::nonzero(%x)\n  return (%y)\n"));
  EXPECT_TRUE(sizedByData("  %y : Tensor = aten::masked_select(%x, %m)\n  return (%y)\n"));
  EXPECT_TRUE(
      sizedByData("  %f : bool = prim::Constant[value=0]()\n"
                  "  %y : Tensor = aten::unique_consecutive(%x, %f, %f, %f)\n  return (%y)\n"));
  EXPECT_TRUE(sizedByData("  %y : Tensor[] = aten::where(%x)\n  return (%x)\n"));
  EXPECT_FALSE(sizedByData("  %y : Tensor = aten::where(%m, %x, %w)\n  return (%y)\n"));
  EXPECT_FALSE(sizedByData("  %y : Tensor = aten::relu(%x)\n  return (%y)\n"));
  // bincount; one_hot counting its classes; tensor_split at a tensor of indices
  EXPECT_TRUE(
      sizedByData("  %n : NoneType = prim::Constant()\n"
                  "  %z : int = prim::Constant[value=0]()\n"
                  "  %y : Tensor = aten::bincount(%x, %n, %z)\n  return (%y)\n"));
  EXPECT_TRUE(
      sizedByData("  %c : int = prim::Constant[value=-1]()\n"
                  "  %y : Tensor = aten::one_hot(%x, %c)\n  return (%y)\n"));
  EXPECT_FALSE(
      sizedByData("  %c : int = prim::Constant[value=10]()\n"
                  "  %y : Tensor = aten::one_hot(%x, %c)\n  return (%y)\n"));
  EXPECT_TRUE(
      sizedByData("  %z : int = prim::Constant[value=0]()\n"
                  "  %y : Tensor[] = aten::tensor_split(%x, %m, %z)\n  return (%x)\n"));
  EXPECT_FALSE(
      sizedByData("  %z : int = prim::Constant[value=0]()\n"
                  "  %k : int = prim::Constant[value=2]()\n"
                  "  %y : Tensor[] = aten::tensor_split(%x, %k, %z)\n  return (%x)\n"));
}

TEST(DataSizes, IndexingWithWhatTheDataComputesButNotWithTheModelsState) {
  // x[m]: a mask the data made (a side value), or one the stage computes from its activation
  EXPECT_TRUE(
      sizedByData("  %i : Tensor?[] = prim::ListConstruct(%m)\n"
                  "  %y : Tensor = aten::index(%x, %i)\n  return (%y)\n"));
  EXPECT_TRUE(
      sizedByData("  %z : int = prim::Constant[value=0]()\n"
                  "  %k : Tensor = aten::gt(%x, %z)\n"
                  "  %n : NoneType = prim::Constant()\n"
                  "  %i : Tensor?[] = prim::ListConstruct(%n, %k)\n"
                  "  %y : Tensor = aten::index(%x, %i)\n  return (%y)\n"));
  // a loop's carried value, which the data began: not the lifted value at its position
  EXPECT_TRUE(
      sizedByData("  %t : bool = prim::Constant[value=1]()\n"
                  "  %n : int = prim::Constant[value=2]()\n"
                  "  %y : Tensor = prim::Loop(%n, %t, %x)\n"
                  "    block0(%i : int, %h : Tensor):\n"
                  "      %l : Tensor?[] = prim::ListConstruct(%h)\n"
                  "      %z : Tensor = aten::index(%w, %l)\n"
                  "      -> (%t, %z)\n"
                  "  return (%y)\n"));
  // a relative position index that a buffer holds, viewed: the same at every call
  EXPECT_FALSE(
      sizedByData("  %s : int = prim::Constant[value=-1]()\n"
                  "  %l : int[] = prim::ListConstruct(%s)\n"
                  "  %v : Tensor = aten::view(%b, %l)\n"
                  "  %i : Tensor?[] = prim::ListConstruct(%v)\n"
                  "  %y : Tensor = aten::index(%w, %i)\n  return (%y)\n"));
}

TEST(DataSizes, NumbersReadFromTensorsButNotTheSizesCarriedAcrossCuts) {
  EXPECT_TRUE(
      sizedByData("  %n : Tensor = aten::sum(%m, %m)\n"
                  "  %k : int = aten::Int(%n)\n  return (%x)\n"));
  EXPECT_TRUE(
      sizedByData("  %n : NoneType = prim::Constant()\n"
                  "  %t : Tensor = aten::sum(%x, %n)\n"
                  "  %k : Scalar = aten::item(%t)\n  return (%x)\n"));
  // a size carried as a 0-dim tensor: made in the stage, or arriving as its input
  EXPECT_FALSE(
      sizedByData("  %d : int = prim::Constant[value=0]()\n"
                  "  %s : int = aten::size(%x, %d)\n"
                  "  %c : Tensor = prim::NumToTensor(%s)\n"
                  "  %k : int = aten::Int(%c)\n  return (%x)\n"));
  // repeat_interleave by a number is sized by shapes; by a tensor of repeats, by values
  EXPECT_FALSE(
      sizedByData("  %r : int = prim::Constant[value=2]()\n"
                  "  %d : int = prim::Constant[value=1]()\n"
                  "  %n : NoneType = prim::Constant()\n"
                  "  %y : Tensor = aten::repeat_interleave(%x, %r, %d, %n)\n  return (%y)\n"));
  EXPECT_TRUE(
      sizedByData("  %n : NoneType = prim::Constant()\n"
                  "  %y : Tensor = aten::repeat_interleave(%x, %m, %n, %n)\n  return (%y)\n"));
}

TEST(DataSizes, NumbersReadFromTheDataAcrossCutsButNotTheSizesCarried) {
  const std::string x = "%x : Tensor", xc = "%x : Tensor, %c : Tensor";
  const std::string read = "  %k : int = aten::Int(%c)\n  return (%x)\n";
  const std::string size =
      "  %d : int = prim::Constant[value=0]()\n"
      "  %s : int = aten::size(%x, %d)\n"
      "  %c : Tensor = prim::NumToTensor(%s)\n  return (%x, %c)\n";
  // a size carried to a later stage, directly or through one that passes it on
  EXPECT_EQ(stagesSizedByData({{x, size}, {xc, read}}), std::vector<int>{});
  EXPECT_EQ(stagesSizedByData({{x, size}, {xc, "  return (%x, %c)\n"}, {xc, read}}),
            std::vector<int>{});
  // a 0-dim tensor of the data, read as a number stages later
  const std::string sum =
      "  %n : NoneType = prim::Constant()\n"
      "  %c : Tensor = aten::sum(%x, %n)\n  return (%x, %c)\n";
  EXPECT_EQ(stagesSizedByData({{x, sum}, {xc, "  return (%x, %c)\n"}, {xc, read}}),
            std::vector<int>{3});
  // a number read from the data and carried: the stage that reads it back is judged too
  const std::string counted =
      "  %n : NoneType = prim::Constant()\n"
      "  %t : Tensor = aten::sum(%x, %n)\n"
      "  %k : int = aten::Int(%t)\n"
      "  %c : Tensor = prim::NumToTensor(%k)\n  return (%x, %c)\n";
  EXPECT_EQ(stagesSizedByData({{x, counted}, {xc, read}}), (std::vector<int>{1, 2}));
  // the chain's input, and a side value the model computed from it; not a buffer (a count)
  EXPECT_TRUE(sizedByData("  %k : int = aten::Int(%x)\n  return (%x)\n"));
  EXPECT_TRUE(sizedByData("  %k : int = aten::Int(%m)\n  return (%x)\n"));
  EXPECT_FALSE(sizedByData("  %k : float = aten::Float(%b)\n  return (%x)\n"));
  EXPECT_TRUE(
      sizedByData("  %t : bool = prim::Constant[value=1]()\n"
                  "  %n : int = prim::Constant[value=2]()\n"
                  "  %y : Tensor = prim::Loop(%n, %t, %x)\n"
                  "    block0(%i : int, %h : Tensor):\n"
                  "      %k : int = aten::Int(%h)\n"
                  "      -> (%t, %h)\n"
                  "  return (%y)\n"));
}

}  // namespace jitckpt::test

namespace jitckpt::test {
namespace {

// One stage over %x, an int %n and an Optional[Tensor] %o, each set by the call beyond its
// tensors' shapes (forward's arguments) or not (attributes).
bool sizedByCallValues(bool beyond_shapes, const std::string& body) {
  StageSpec stage;
  stage.graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR("graph(%x : Tensor, %n : int, %o : Tensor?):\n" + body, stage.graph.get());
  stage.num_activation_inputs = 1;
  stage.lifted = {0, 1};
  const std::vector<LiftedSpec> lifted = {{"n", LiftedKind::Scalar, beyond_shapes},
                                          {"o", LiftedKind::Scalar, beyond_shapes}};
  return !findStagesSizedByData({stage}, lifted).empty();
}

}  // namespace

TEST(DataSizes, NumbersAndMasksTheCallSetsBeyondShapes) {
  // h[:n]
  const std::string slice =
      "  %z : int = prim::Constant[value=0]()\n"
      "  %one : int = prim::Constant[value=1]()\n"
      "  %y : Tensor = aten::slice(%x, %z, %z, %n, %one)\n  return (%y)\n";
  EXPECT_TRUE(sizedByCallValues(true, slice));
  EXPECT_FALSE(sizedByCallValues(false, slice));
  // x[mask] with an optional mask of forward's
  const std::string index =
      "  %m : Tensor = prim::unchecked_cast(%o)\n"
      "  %i : Tensor?[] = prim::ListConstruct(%m)\n"
      "  %y : Tensor = aten::index(%x, %i)\n  return (%y)\n";
  EXPECT_TRUE(sizedByCallValues(true, index));
  EXPECT_FALSE(sizedByCallValues(false, index));
  // an optional tensor read otherwise is no size
  EXPECT_FALSE(sizedByCallValues(true,
                                 "  %m : Tensor = prim::unchecked_cast(%o)\n"
                                 "  %y : Tensor = aten::mul(%x, %m)\n  return (%y)\n"));
}

}  // namespace jitckpt::test
