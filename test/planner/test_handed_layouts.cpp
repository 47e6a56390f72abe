// The layouts of the gradients a step hands a B (stage_measurements.h): a B above that passes one
// gradient on to several of its inputs (an add's) hands the stage below one tensor for several
// outputs, and a cat's backward slices of one storage; the profile measures that B again on ones
// laid out so, not on ones of their own (each freed once read, they made its peak look lower
// than the step's).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "planner/stage_measurements.h"

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

// A cat's backward hands on slices of one gradient: one part to a skip that B(l) passes on, one
// that B(l) reads. Once B(l) has read its slice, the storage stays held for the skip's: measured
// on ones of their own, the slice read would be freed, and B's peak would look lower than the
// step's.
TEST(HandedLayouts, SlicesOfOneGradientAreViewsOfOneStorage) {
  const torch::Tensor cat = torch::ones({2, 8, 3});
  const torch::Tensor skip = cat.narrow(1, 4, 4), read = cat.narrow(1, 0, 2);
  const GradientLayouts handed = layoutsOf({skip, read, torch::ones({2, 2, 3})});
  EXPECT_EQ(handed[1].shares_storage_with, 0);
  EXPECT_EQ(handed[1].same_as, -1);
  EXPECT_EQ(handed[2].shares_storage_with, -1);
  EXPECT_EQ(handed[0].offset, 12);
  EXPECT_EQ(handed[0].storage_elements, 48);
  const auto options = torch::TensorOptions().requires_grad(true);
  const Tensors outputs = {torch::zeros({2, 4, 3}, options), torch::zeros({2, 2, 3}, options),
                           torch::zeros({2, 2, 3}, options)};
  EXPECT_FALSE(measuredOn(handed, layoutsOf(outputs)));
  const Tensors ones = onesLaidOut(handed, outputs);
  EXPECT_TRUE(ones[0].is_alias_of(ones[1]));
  EXPECT_FALSE(ones[2].is_alias_of(ones[0]));
  EXPECT_EQ(ones[0].storage().nbytes(), cat.storage().nbytes());
  EXPECT_EQ(ones[0].storage_offset(), 12);
  EXPECT_EQ(ones[1].strides(), read.strides());
  EXPECT_TRUE(ones[0].eq(1).all().item<bool>() && ones[1].eq(1).all().item<bool>());
}

// A slice alone still keeps its whole storage: B is measured on ones as large.
TEST(HandedLayouts, ASliceHoldsItsWholeStorage) {
  const torch::Tensor whole = torch::ones({4, 3});
  const GradientLayouts handed = layoutsOf({whole.narrow(0, 2, 2)});
  const Tensors outputs = {torch::zeros({2, 3}, torch::TensorOptions().requires_grad(true))};
  EXPECT_FALSE(measuredOn(handed, layoutsOf(outputs)));
  const Tensors ones = onesLaidOut(handed, outputs);
  EXPECT_EQ(ones[0].storage().nbytes(), whole.storage().nbytes());
  EXPECT_TRUE(ones[0].is_contiguous());
  EXPECT_TRUE(measuredOn(layoutsOf({torch::ones({2, 3})}), layoutsOf(outputs)));
  // The same gradient as an output whose own is not laid out (another shape): ones of its own.
  const torch::Tensor g = torch::ones({2, 3});
  const auto options = torch::TensorOptions().requires_grad(true);
  const Tensors other = {torch::zeros({3, 2}, options), torch::zeros({2, 3}, options)};
  EXPECT_TRUE(onesLaidOut(layoutsOf({g, g}), other)[1].eq(1).all().item<bool>());
}

// An output the model drops (an LSTM's final state) is handed no gradient where measureMemory
// handed it ones; the LSTM's backward then makes zeros for it inside B, above B's start.
TEST(HandedLayouts, AnOutputHandedNoGradientIsMeasuredWithout) {
  const GradientLayouts handed = layoutsOf({torch::ones({2, 3}), torch::Tensor(), torch::Tensor()});
  EXPECT_FALSE(measuredOn(handed, layoutsOf(outputs())));
  const Tensors ones = onesLaidOut(handed, outputs());
  EXPECT_TRUE(ones[0].defined());
  EXPECT_FALSE(ones[1].defined());
  EXPECT_FALSE(ones[2].defined());
  // An output that requires no grad gets none in both (StageProfile::output_layouts).
  EXPECT_TRUE(measuredOn(layoutsOf({torch::Tensor()}), layoutsOf({torch::Tensor()})));
}

}  // namespace
}  // namespace jitckpt
