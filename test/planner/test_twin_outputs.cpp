// sizesIgnoreValues (twin_outputs.h): whether a chain's stages can make a size, a branch or an
// error of their tensors' values, which decides whether a profile of sizes alone may stand in for
// its twins' runs. Each case is one stage over an activation %x, a flag %training (a lifted
// number) and a buffer %b.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <string>

#include "planner/twin_outputs.h"

namespace jitckpt::test {
namespace {

bool ignoresValues(const std::string& body) {
  StageSpec stage;
  stage.graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR("graph(%x : Tensor, %training : bool, %b : Tensor):\n" + body,
                      stage.graph.get());
  stage.num_activation_inputs = 1;
  stage.lifted = {0, 1};
  return sizesIgnoreValues(
      ChainStages({stage}, {{"training", LiftedKind::Scalar}, {"b", LiftedKind::Buffer}}));
}

// A scripted BatchNorm's checks: its input's rank, its flag, the product of its sizes.
const std::string kBatchNormChecks =
    "  %one : int = prim::Constant[value=1]()\n"
    "  %four : int = prim::Constant[value=4]()\n"
    "  %yes : bool = prim::Constant[value=1]()\n"
    "  %d : int = aten::dim(%x)\n"
    "  %wrong : bool = aten::ne(%d, %four)\n"
    "  prim::If(%wrong)\n"
    "    block0():\n"
    "      prim::RaiseException(%d)\n"
    "      -> ()\n"
    "    block1():\n"
    "      -> ()\n"
    "  prim::If(%training)\n"
    "    block0():\n"
    "      %counted : Tensor = aten::add_(%b, %one, %one)\n"
    "      -> ()\n"
    "    block1():\n"
    "      -> ()\n"
    "  %sizes : int[] = aten::size(%x)\n"
    "  %n : int = aten::len(%sizes)\n"
    "  %product : int = prim::Loop(%n, %yes, %one)\n"
    "    block0(%i : int, %p : int):\n"
    "      %s : int = aten::__getitem__(%sizes, %i)\n"
    "      %q : int = aten::mul(%p, %s)\n"
    "      -> (%yes, %q)\n"
    "  %single : bool = aten::eq(%product, %one)\n"
    "  prim::If(%single)\n"
    "    block0():\n"
    "      prim::RaiseException(%d)\n"
    "      -> ()\n"
    "    block1():\n"
    "      -> ()\n";

}  // namespace

TEST(TwinOutputs, BranchesOnSizesAndFlagsIgnoreValues) {
  EXPECT_TRUE(ignoresValues(kBatchNormChecks + "  %y : Tensor = aten::relu(%x)\n  return (%y)\n"));
}

TEST(TwinOutputs, BranchesOnValuesDoNot) {
  // if x.sum() > 0: a branch on a value
  EXPECT_FALSE(
      ignoresValues("  %none : NoneType = prim::Constant()\n"
                    "  %zero : int = prim::Constant[value=0]()\n"
                    "  %t : Tensor = aten::sum(%x, %none)\n"
                    "  %g : Tensor = aten::gt(%t, %zero)\n"
                    "  %c : bool = aten::Bool(%g)\n"
                    "  %y : Tensor = prim::If(%c)\n"
                    "    block0():\n"
                    "      %r : Tensor = aten::relu(%x)\n"
                    "      -> (%r)\n"
                    "    block1():\n"
                    "      -> (%x)\n"
                    "  return (%y)\n"));
  // a loop whose count a value sets, and one that carries a tensor from step to step
  EXPECT_FALSE(
      ignoresValues("  %yes : bool = prim::Constant[value=1]()\n"
                    "  %none : NoneType = prim::Constant()\n"
                    "  %t : Tensor = aten::sum(%x, %none)\n"
                    "  %n : int = aten::Int(%t)\n"
                    "  prim::Loop(%n, %yes)\n"
                    "    block0(%i : int):\n"
                    "      -> (%yes)\n"
                    "  return (%x)\n"));
  EXPECT_FALSE(
      ignoresValues("  %yes : bool = prim::Constant[value=1]()\n"
                    "  %two : int = prim::Constant[value=2]()\n"
                    "  %y : Tensor = prim::Loop(%two, %yes, %x)\n"
                    "    block0(%i : int, %h : Tensor):\n"
                    "      %r : Tensor = aten::relu(%h)\n"
                    "      -> (%yes, %r)\n"
                    "  return (%y)\n"));
  // an error raised on a value, even within checks on sizes
  EXPECT_FALSE(ignoresValues(kBatchNormChecks + "  %z : bool = aten::is_nonzero(%x)\n"
                                                "  return (%x)\n"));
}

}  // namespace jitckpt::test
