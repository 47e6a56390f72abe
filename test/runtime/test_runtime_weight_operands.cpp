// multipliesByAComputedWeight (runtime/weight_operands.h) on stage graphs in IR text: which
// operands of matmul and linear count as weights computed in the stage.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/weight_operands.h"

namespace jitckpt::test {
namespace {

// A stage with one activation input %x and lifted tensors %w, %v that may require grad (%b is a
// buffer), computing `body` and returning %y.
bool computedWeight(const std::string& body) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(
      "graph(%x : Tensor, %w : Tensor, %v : Tensor, %b : Tensor):\n" + body + "  return (%y)\n",
      graph.get());
  return multipliesByAComputedWeight(*graph, 1, {true, true, false});
}

TEST(WeightOperands, AParameterReadAsItIsIsNotComputed) {
  EXPECT_FALSE(computedWeight("  %y : Tensor = aten::linear(%x, %w, %v)\n"));
  EXPECT_FALSE(computedWeight("  %y : Tensor = aten::matmul(%x, %w)\n"));
}

TEST(WeightOperands, AViewOfAParameterIsComputed) {
  EXPECT_TRUE(
      computedWeight("  %t : Tensor = aten::t(%w)\n"
                     "  %y : Tensor = aten::matmul(%x, %t)\n"));
  EXPECT_TRUE(
      computedWeight("  %t : Tensor = aten::t(%w)\n"
                     "  %y : Tensor = aten::matmul(%t, %x)\n"));
}

TEST(WeightOperands, AWeightComputedFromParametersIsComputed) {
  EXPECT_TRUE(
      computedWeight("  %g : Tensor = aten::mul(%w, %v)\n"
                     "  %y : Tensor = aten::linear(%x, %g, %v)\n"));
}

TEST(WeightOperands, WhatAnActivationOrABufferMakesIsNot) {
  // (An activation's value requires grad only when recorded too, but the rule covers weights.)
  EXPECT_FALSE(
      computedWeight("  %a : Tensor = aten::mul(%w, %x)\n"
                     "  %y : Tensor = aten::matmul(%x, %a)\n"));
  EXPECT_FALSE(
      computedWeight("  %t : Tensor = aten::t(%b)\n"
                     "  %y : Tensor = aten::matmul(%x, %t)\n"));
}

TEST(WeightOperands, ALinearsInputIsNotItsWeight) {
  EXPECT_FALSE(
      computedWeight("  %t : Tensor = aten::t(%w)\n"
                     "  %y : Tensor = aten::linear(%t, %x, %v)\n"));
}

}  // namespace
}  // namespace jitckpt::test
