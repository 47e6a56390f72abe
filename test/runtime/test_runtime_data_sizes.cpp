// makesTensorsSizedByData: which stage graphs make a tensor whose size comes from values. Each case
// is one stage over an activation %x, a parameter %w, a buffer %b and a side value %m (a mask the
// model computed before the chain).
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/data_sizes.h"

namespace jitckpt::test {
namespace {

const std::vector<LiftedSpec> kLifted = {
    {"w", LiftedKind::Parameter}, {"b", LiftedKind::Buffer}, {"m", LiftedKind::Side}};

bool sizedByData(const std::string& body) {
  StageSpec stage;
  stage.graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR("graph(%x : Tensor, %w : Tensor, %b : Tensor, %m : Tensor):\n" + body,
                      stage.graph.get());
  stage.num_activation_inputs = 1;
  stage.lifted = {0, 1, 2};
  return makesTensorsSizedByData(stage, kLifted);
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
  EXPECT_FALSE(sizedByData("  %k : int = aten::Int(%x)\n  return (%x)\n"));
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

}  // namespace jitckpt::test
