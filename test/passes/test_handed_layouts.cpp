// The layouts of the gradients a step hands a B (stage_measurements.h): a B above that passes one
// gradient on to several of its inputs (an add's) hands the stage below one tensor for several
// outputs; the profile measures that B again on one tensor of ones for them, not one each (each
// freed once read, they made its peak look lower than the step's).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "passes/stage_measurements.h"

namespace jitckpt {
namespace {

Tensors outputs() {
  const auto options = torch::TensorOptions().requires_grad(true);
  return {torch::zeros({2, 3}, options), torch::zeros({2, 3}, options),
          torch::zeros({2, 3}, options)};
}

TEST(HandedLayouts, OneGradientForTwoOutputsIsOneTensorOfOnes) {
  const torch::Tensor g = torch::ones({2, 3});
  const GradientLayouts handed = layoutsOf({g, g, torch::ones({2, 3})});
  EXPECT_EQ(handed[0].same_as, -1);
  EXPECT_EQ(handed[1].same_as, 0);
  EXPECT_EQ(handed[2].same_as, -1);
  // measureMemory handed B ones of their own: B is measured again.
  EXPECT_FALSE(measuredOn(handed, layoutsOf(outputs())));
  const Tensors ones = onesLaidOut(handed, outputs());
  EXPECT_TRUE(ones[0].is_same(ones[1]));
  EXPECT_FALSE(ones[2].is_same(ones[0]));
  EXPECT_TRUE(ones[1].eq(1).all().item<bool>());
}

TEST(HandedLayouts, EqualGradientsOfTheirOwnAreNotOneTensor) {
  const torch::Tensor g = torch::ones({2, 3});
  const GradientLayouts apart = layoutsOf({g, g.clone(), g.view({2, 3})});
  EXPECT_EQ(apart[1].same_as, -1);
  EXPECT_EQ(apart[2].same_as, 0);  // a view of the same elements is the same gradient
  EXPECT_TRUE(measuredOn(layoutsOf({g, g.clone(), g.clone()}), layoutsOf(outputs())));
  const torch::Tensor h = torch::ones({2, 3});
  EXPECT_FALSE(sameLayouts(layoutsOf({g, g}), layoutsOf({g, g.clone()})));
  EXPECT_TRUE(sameLayouts(layoutsOf({g, g}), layoutsOf({h, h})));
  // Channels-last against contiguous: a layout B(l) must be measured on again.
  const torch::Tensor image = torch::ones({2, 4, 3, 3});
  EXPECT_FALSE(sameLayouts(layoutsOf({image}),
                           layoutsOf({image.contiguous(torch::MemoryFormat::ChannelsLast)})));
}

}  // namespace
}  // namespace jitckpt
