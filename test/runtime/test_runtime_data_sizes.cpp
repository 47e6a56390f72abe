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

// What every stage takes after its activations: the lifted values, and how its graph declares them.
struct Lifted {
  std::vector<LiftedSpec> specs;
  std::string inputs;
};
const Lifted kLifted = {
    {{"w", LiftedKind::Parameter}, {"b", LiftedKind::Buffer}, {"m", LiftedKind::Side}},
    "%w : Tensor, %b : Tensor, %m : Tensor"};

// Each stage: its activation inputs ("%x : Tensor, %c : Tensor") and its body. `steered`
// (optional): the stages that branch or loop on the data.
std::vector<int> stagesSizedByData(
    const std::vector<std::pair<std::string, std::string>>& activations_and_bodies,
    std::vector<int>* steered = nullptr, const Lifted& lifted = kLifted) {
  std::vector<StageSpec> stages;
  for (const auto& [activations, body] : activations_and_bodies) {
    StageSpec stage;
    stage.graph = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR("graph(" + activations + ", " + lifted.inputs + "):\n" + body,
                        stage.graph.get());
    stage.num_activation_inputs = stage.graph->inputs().size() - lifted.specs.size();
    for (size_t i = 0; i < lifted.specs.size(); ++i) stage.lifted.push_back(i);
    stages.push_back(std::move(stage));
  }
  return findStagesSizedByData(stages, lifted.specs, steered);
}

bool sizedByData(const std::string& body) {
  return !stagesSizedByData({{"%x : Tensor", body}}).empty();
}

// Whether one stage over %x is sized by data and steered by it: {sized, steered}.
std::pair<bool, bool> steeredByData(const std::string& body) {
  std::vector<int> steered;
  const bool sized = !stagesSizedByData({{"%x : Tensor", body}}, &steered).empty();
  return {sized, !steered.empty()};
}

// A branch on `flag` that picks 4 or 8, handed on where `used`.
std::string pickOnFlag(const std::string& flag, bool used = true) {
  return "  %k : int = prim::If(" + flag +
         ")\n"
         "    block0():\n"
         "      %four : int = prim::Constant[value=4]()\n"
         "      -> (%four)\n"
         "    block1():\n"
         "      %eight : int = prim::Constant[value=8]()\n"
         "      -> (%eight)\n" +
         (used ? "  return (%x, %k)\n" : "  return (%x)\n");
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

TEST(DataSizes, BranchesAndLoopsOnTheDataButNotOnSizesOrTheModelsState) {
  const std::pair<bool, bool> yes{true, true}, no{false, false};
  // n = 4 if bool(m.any()) else 8; a flag of torch.equal or of `if x:`
  EXPECT_EQ(steeredByData("  %a : Tensor = aten::any(%m)\n"
                          "  %f : bool = aten::Bool(%a)\n" +
                          pickOnFlag("%f")),
            yes);
  EXPECT_EQ(steeredByData("  %f : bool = aten::equal(%x, %w)\n" + pickOnFlag("%f")), yes);
  EXPECT_EQ(steeredByData("  %f : bool = aten::is_nonzero(%x)\n" + pickOnFlag("%f")), yes);
  // a flag of a size, or of a buffer; a branch on the data that hands nothing on
  EXPECT_EQ(steeredByData("  %d : int = prim::Constant[value=0]()\n"
                          "  %s : int = aten::size(%x, %d)\n"
                          "  %f : bool = aten::gt(%s, %d)\n" +
                          pickOnFlag("%f")),
            no);
  EXPECT_EQ(steeredByData("  %f : bool = aten::Bool(%b)\n" + pickOnFlag("%f")), no);
  EXPECT_EQ(steeredByData("  %f : bool = aten::Bool(%x)\n" + pickOnFlag("%f", false)), no);
  // `s > 0 and bool(m)`: the flag the first branch yields steers the second
  EXPECT_EQ(steeredByData("  %d : int = prim::Constant[value=0]()\n"
                          "  %s : int = aten::size(%x, %d)\n"
                          "  %g : bool = aten::gt(%s, %d)\n"
                          "  %f : bool = prim::If(%g)\n"
                          "    block0():\n"
                          "      %v : bool = aten::Bool(%m)\n"
                          "      -> (%v)\n"
                          "    block1():\n"
                          "      %no : bool = prim::Constant[value=0]()\n"
                          "      -> (%no)\n" +
                          pickOnFlag("%f")),
            yes);
  // a loop as long as the data says: its condition, or its count
  EXPECT_EQ(steeredByData("  %t : bool = prim::Constant[value=1]()\n"
                          "  %n : int = prim::Constant[value=9223372036854775807]()\n"
                          "  %y : Tensor = prim::Loop(%n, %t, %x)\n"
                          "    block0(%i : int, %h : Tensor):\n"
                          "      %z : Tensor = aten::tanh(%h)\n"
                          "      %go : bool = aten::Bool(%z)\n"
                          "      -> (%go, %z)\n"
                          "  return (%y)\n"),
            yes);
  EXPECT_EQ(steeredByData("  %t : bool = prim::Constant[value=1]()\n"
                          "  %n : int = aten::Int(%m)\n"
                          "  %y : Tensor = prim::Loop(%n, %t, %x)\n"
                          "    block0(%i : int, %h : Tensor):\n"
                          "      %z : Tensor = aten::tanh(%h)\n"
                          "      -> (%t, %z)\n"
                          "  return (%y)\n"),
            yes);
  // a flag of the data carried to a later stage, which branches on it
  std::vector<int> steered;
  EXPECT_EQ(stagesSizedByData(
                {{"%x : Tensor",
                  "  %a : Tensor = aten::any(%x)\n"
                  "  %f : bool = aten::Bool(%a)\n"
                  "  %i : int = prim::Constant[value=11]()\n"
                  "  %n : NoneType = prim::Constant()\n"
                  "  %no : bool = prim::Constant[value=0]()\n"
                  "  %c : Tensor = aten::tensor(%f, %i, %n, %no)\n"
                  "  return (%x, %c)\n"},
                 {"%x : Tensor, %c : Tensor", "  %g : bool = aten::Bool(%c)\n" + pickOnFlag("%g")}},
                &steered),
            std::vector<int>{2});
  EXPECT_EQ(steered, std::vector<int>{2});
  // as many times as a size says
  EXPECT_EQ(steeredByData("  %t : bool = prim::Constant[value=1]()\n"
                          "  %d : int = prim::Constant[value=0]()\n"
                          "  %n : int = aten::size(%x, %d)\n"
                          "  %y : Tensor = prim::Loop(%n, %t, %x)\n"
                          "    block0(%i : int, %h : Tensor):\n"
                          "      %z : Tensor = aten::tanh(%h)\n"
                          "      -> (%t, %z)\n"
                          "  return (%y)\n"),
            no);
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

namespace {

// One stage over %x, an int %n and an Optional[Tensor] %o, each set by the call beyond its
// tensors' shapes (forward's arguments) or not (attributes).
bool sizedByCallValues(bool beyond_shapes, const std::string& body) {
  const Lifted lifted = {
      {{"n", LiftedKind::Scalar, beyond_shapes}, {"o", LiftedKind::Scalar, beyond_shapes}},
      "%n : int, %o : Tensor?"};
  return !stagesSizedByData({{"%x : Tensor", body}}, nullptr, lifted).empty();
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
