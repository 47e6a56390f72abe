// ChainStages::inputsNeverRequireGrad: which activations carried across a cut never require grad.
// Each case is a chain of three stages over an activation %x and a parameter %w; the first stage
// returns (%x, %y) and the question is %y as the second stage's input, the chain input %x
// requiring grad unless a case says otherwise.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/stages.h"

namespace jitckpt::test {
namespace {

const std::vector<LiftedSpec> kLiftedWeight = {{"w", LiftedKind::Parameter}};

StageSpec stageOf(const std::string& ir, size_t activations, bool reads_weight) {
  StageSpec stage;
  stage.graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, stage.graph.get());
  stage.num_activation_inputs = activations;
  if (reads_weight) stage.lifted = {0};
  return stage;
}

// Stage 1 computes %y from `body`; stage 2 (`second`, over %x, %y and %w) passes both on.
ChainStages chainOf(const std::string& body, const std::string& second = "  return (%x, %y)\n") {
  const std::vector<StageSpec> stages = {
      stageOf("graph(%x : Tensor, %w : Tensor):\n" + body + "  return (%x, %y)\n", 1, true),
      stageOf("graph(%x : Tensor, %y : Tensor, %w : Tensor):\n" + second, 2, true),
      stageOf("graph(%x : Tensor, %y : Tensor):\n  return (%x, %y)\n", 2, false)};
  return ChainStages(stages, kLiftedWeight);
}

// Whether input i of stage l never requires grad.
bool never(const ChainStages& chain, int l, size_t i, bool input_requires_grad = true) {
  return chain.inputsNeverRequireGrad({input_requires_grad}, {})->at(l - 1).at(i);
}

bool carriedNever(const std::string& body) { return never(chainOf(body), 2, 1); }

// A causal mask as nn.Transformer makes it, in %<name>.
std::string causalMask(const std::string& name = "y") {
  return "  %one : int = prim::Constant[value=1]()\n"
         "  %inf : float = prim::Constant[value=-1000000000.0]()\n"
         "  %none : NoneType = prim::Constant()\n"
         "  %t : int = aten::size(%x, %one)\n"
         "  %shape : int[] = prim::ListConstruct(%t, %t)\n"
         "  %full : Tensor = aten::full(%shape, %inf, %none, %none, %none, %none)\n"
         "  %" +
         name + " : Tensor = aten::triu(%full, %one)\n";
}

}  // namespace

TEST(NeverRequiresGrad, MasksMadeFromShapesAndComparisons) {
  EXPECT_TRUE(carriedNever(causalMask()));
  EXPECT_TRUE(
      carriedNever("  %z : int = prim::Constant[value=0]()\n"
                   "  %y : Tensor = aten::gt(%x, %z)\n"));
  EXPECT_TRUE(
      carriedNever("  %none : NoneType = prim::Constant()\n"
                   "  %y : Tensor = aten::zeros_like(%x, %none, %none, %none, %none, %none)\n"));
  EXPECT_TRUE(carriedNever("  %y : Tensor = aten::detach(%x)\n"));
  EXPECT_TRUE(carriedNever("  %y : Tensor = aten::detach_(%x)\n"));  // export's tensor literals
  // the chain input: as it is at the call
  EXPECT_FALSE(never(chainOf(causalMask()), 1, 0));
  EXPECT_TRUE(never(chainOf(causalMask()), 1, 0, false));
}

TEST(NeverRequiresGrad, WhatTheActivationOrAParameterReaches) {
  EXPECT_FALSE(carriedNever("  %y : Tensor = aten::mul(%x, %w)\n"));
  EXPECT_FALSE(carriedNever("  %y : Tensor = aten::relu(%x)\n"));
  // what the chain input reaches where it needs no grad at this call, until a parameter joins
  const ChainStages relu = chainOf("  %y : Tensor = aten::relu(%x)\n");
  EXPECT_TRUE(never(relu, 2, 1, false));
  EXPECT_TRUE(never(relu, 3, 0, false));
  EXPECT_FALSE(never(chainOf("  %y : Tensor = aten::mul(%x, %w)\n"), 2, 1, false));
  EXPECT_FALSE(never(chainOf(causalMask()), 2, 0));
  // a mask given a parameter's values in place, in its own stage
  EXPECT_FALSE(carriedNever(causalMask() + "  %a : int = prim::Constant[value=1]()\n"
                                           "  %s : Tensor = aten::add_(%y, %w, %a)\n"));
  // a view of the mask, the mask then written
  EXPECT_FALSE(carriedNever(causalMask("m") + "  %z : int = prim::Constant[value=0]()\n"
                                              "  %y : Tensor = aten::select(%m, %z, %z)\n"
                                              "  %a : int = prim::Constant[value=1]()\n"
                                              "  %s : Tensor = aten::add_(%m, %w, %a)\n"));
}

TEST(NeverRequiresGrad, AMaskWrittenInAStageThatPassesItOn) {
  const ChainStages chain = chainOf(causalMask(),
                                    "  %a : int = prim::Constant[value=1]()\n"
                                    "  %s : Tensor = aten::add_(%y, %w, %a)\n"
                                    "  return (%x, %y)\n");
  EXPECT_FALSE(never(chain, 3, 1));
  EXPECT_TRUE(never(chain, 2, 1));  // as it enters: the write comes after
  EXPECT_TRUE(never(chainOf(causalMask()), 3, 1));
  // written from itself alone (relu_): still none
  EXPECT_TRUE(
      never(chainOf(causalMask(), "  %s : Tensor = aten::relu_(%y)\n  return (%x, %y)\n"), 3, 1));
}

// A mask made in stage 1 from a side tensor %m (lifted value 1, after the parameter): whether it
// never requires grad as stage 2's input %y, given which lifted tensors require grad at the call.
bool sideMaskNever(const std::vector<bool>& lifted_require_grad, const std::string& write = "") {
  StageSpec first = stageOf("graph(%x : Tensor, %w : Tensor, %m : Tensor):\n" + write +
                                "  %y : Tensor = aten::neg(%m)\n  return (%x, %y)\n",
                            1, true);
  first.lifted = {0, 1};
  if (!write.empty()) first.mutated_lifted = {1};
  const ChainStages rest = chainOf("  %y : Tensor = aten::neg(%x)\n");
  const ChainStages chain({first, rest.stage(2), rest.stage(3)},
                          {{"w", LiftedKind::Parameter}, {"m", LiftedKind::Side}});
  return chain.inputsNeverRequireGrad({true}, lifted_require_grad)->at(1).at(1);
}

TEST(NeverRequiresGrad, WhatASideTensorThatNeedsNoGradReaches) {
  EXPECT_TRUE(sideMaskNever({true, false}));
  EXPECT_FALSE(sideMaskNever({true, true}));
  EXPECT_FALSE(sideMaskNever({}));  // not known: it may
  // written in place from the parameter by a stage: it may, whatever it was at the call
  EXPECT_FALSE(sideMaskNever({true, false},
                             "  %a : int = prim::Constant[value=1]()\n"
                             "  %s : Tensor = aten::add_(%m, %w, %a)\n"));
}

TEST(NeverRequiresGrad, BranchesAndLoops) {
  // a branch that returns the mask or the activation may return one that requires grad
  EXPECT_FALSE(carriedNever(causalMask("m") + "  %c : bool = prim::Constant[value=1]()\n"
                                              "  %y : Tensor = prim::If(%c)\n"
                                              "    block0():\n      -> (%m)\n"
                                              "    block1():\n      -> (%x)\n"));
  EXPECT_TRUE(carriedNever(causalMask("m") +
                           "  %c : bool = prim::Constant[value=1]()\n"
                           "  %y : Tensor = prim::If(%c)\n"
                           "    block0():\n      -> (%m)\n"
                           "    block1():\n      %d : Tensor = aten::detach(%x)\n      -> (%d)\n"));
  // a loop that adds the parameter to what it carries, from the second trip on
  EXPECT_FALSE(carriedNever(causalMask("m") + "  %n : int = prim::Constant[value=3]()\n"
                                              "  %c : bool = prim::Constant[value=1]()\n"
                                              "  %y : Tensor = prim::Loop(%n, %c, %m)\n"
                                              "    block0(%i : int, %h : Tensor):\n"
                                              "      %a : int = prim::Constant[value=1]()\n"
                                              "      %g : Tensor = aten::add(%h, %w, %a)\n"
                                              "      -> (%c, %g)\n"));
  EXPECT_TRUE(carriedNever(causalMask("m") + "  %n : int = prim::Constant[value=3]()\n"
                                             "  %c : bool = prim::Constant[value=1]()\n"
                                             "  %y : Tensor = prim::Loop(%n, %c, %m)\n"
                                             "    block0(%i : int, %h : Tensor):\n"
                                             "      %a : int = prim::Constant[value=1]()\n"
                                             "      %g : Tensor = aten::triu(%h, %a)\n"
                                             "      -> (%c, %g)\n"));
}

}  // namespace jitckpt::test
