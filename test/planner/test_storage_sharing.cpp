// Storage sharing for the profile: which storage each gradient a B returns lies in, and the
// gradients as a step holds them when B hands slices of one on from stage to stage.
#include <ATen/Functions.h>
#include <gtest/gtest.h>

#include "planner/storage_sharing.h"

namespace jitckpt {
namespace {

constexpr int64_t kFloatBytes = 4;  // of a float32

// A B that passes a gradient on (here a slice of cat's gradient) returns it as it came, beside
// a gradient it made and a view of that.
TEST(StorageSharing, GradientsHandedOnAreToldFromThoseBMade) {
  const at::Tensor whole = at::ones({2, 10});
  const Tensors output_grads{at::ones({5}), whole.narrow(1, 4, 6), at::Tensor()};
  const HandedGradients handed(output_grads);
  const at::Tensor made = at::zeros({3});
  const GradientSources sources =
      handed.sourcesOf({output_grads[1], made, made.view({1, 3}), at::Tensor()});
  EXPECT_EQ(sources.handed_on_from, (std::vector<int>{1, -1, -1, -1}));
  EXPECT_EQ(sources.made, (std::vector<int>{-1, 0, 0, -1}));
  EXPECT_EQ(sources.made_bytes, (std::vector<int64_t>{3 * kFloatBytes}));
}

// An Inception block cut between its branches: stage 3 (cat) makes one gradient of 40 bytes and
// hands each of its 4 inputs a slice; stages 2 and 1 each read one slice and hand the others on,
// beside 8 bytes of their own. Each delta keeps the whole 40 alive while it holds any slice.
TEST(StorageSharing, ASliceHandedOnHoldsTheWholeUntilTheLastBThatReadsIt) {
  GradientSources cat{{-1, -1, -1, -1}, {0, 0, 0, 0}, {40}, {10, 10, 10, 10}, {}, {}};
  GradientSources branch2{{0, 1, 2, -1}, {-1, -1, -1, 0}, {8}, {10, 10, 10, 8}, {}, {}};
  GradientSources branch1{{0, 1, -1}, {-1, -1, 0}, {8}, {10, 10, 8}, {}, {}};
  // delta^3: the chain's output gradient, 100 bytes.
  const HeldGradients held = heldGradients({branch1, branch2, cat}, {100});
  EXPECT_EQ(held.wd, (std::vector<int64_t>{40 + 8, 40 + 8, 40}));
  // B(2) and B(1) hold the 40 bytes in what they read and in what they hand on: counted once
  // while each runs. B(3) makes its 40 anew.
  EXPECT_EQ(held.handed, (std::vector<int64_t>{0, 40, 40, 0}));
}

// A stage that passes a tensor through to a next stage that reads it for its shape only: the
// profile hands B a gradient for that output, and PyTorch 2.x's engine adds B's own gradient of
// the tensor into it in place, so the gradient returned lies in the one handed. A step hands no
// gradient there (the next stage gave none): B makes that gradient, of its own size.
TEST(StorageSharing, AGradientAddedIntoOneAStepDoesNotHandIsMadeByB) {
  const at::Tensor handed_x = at::ones({4, 4});
  const Tensors output_grads{at::ones({3}), handed_x};
  const HandedGradients handed(output_grads);
  GradientSources head = handed.sourcesOf({handed_x});
  EXPECT_EQ(head.handed_on_from, (std::vector<int>{1}));
  EXPECT_EQ(head.own_bytes, (std::vector<int64_t>{16 * kFloatBytes}));
  // The step: output 0's gradient is 12 bytes, output 1 (passed through, read for its shape by
  // the stage after) gets none.
  GradientSources after{{-1, -1}, {0, -1}, {12}, {12, 0}, {}, {}};
  const HeldGradients held = heldGradients({head, after}, {12});
  EXPECT_EQ(held.wd, (std::vector<int64_t>{16 * kFloatBytes, 12}));
  EXPECT_EQ(held.handed, (std::vector<int64_t>{0, 0, 0}));
}

// A dense layer's B under PyTorch 2.x: handed fresh ones, autograd adds the layer's own use of an
// input it passes through into the gradient in place, and returns that gradient; the version
// counter tells it from one passed on untouched.
TEST(StorageSharing, AGradientWrittenInPlaceIsToldFromOnePassedOn) {
  const Tensors output_grads{at::ones({4}), at::ones({4}), at::ones({2, 2})};
  const HandedGradients handed(output_grads);
  at::Tensor added = output_grads[0];
  added.add_(at::ones({4}));
  const GradientSources sources =
      handed.sourcesOf({added, output_grads[1], output_grads[2].view({4}).mul_(2)});
  EXPECT_EQ(sources.handed_on_from, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(sources.written, (std::vector<bool>{true, false, true}));
  // The very tensor handed is a view in a step where that one is (told by heldGradients); a
  // view of it, or of a tensor B made, is one anyway.
  EXPECT_EQ(sources.view, (std::vector<bool>{false, false, true}));
  const at::Tensor made = at::zeros({2, 2});
  EXPECT_EQ(handed.sourcesOf({made, made.t()}).view, (std::vector<bool>{false, true}));
}

// A transposing stage (2) hands on a view of its gradient. Autograd cannot add into a view in
// place, so B(1), which wrote into the gradient it was handed (fresh ones in the profile), makes
// a new one in a step, beside the view it reads: delta^0 shares nothing with delta^1. Passed on
// untouched, the view is delta^0 itself.
TEST(StorageSharing, AGradientWrittenInPlaceIsMadeAnewWhereAStepHandsAView) {
  GradientSources transpose{{0}, {-1}, {}, {16}, {false}, {true}};
  GradientSources layer{{0}, {-1}, {}, {16}, {true}, {false}};
  HeldGradients held = heldGradients({layer, transpose}, {16});
  EXPECT_EQ(held.wd, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(held.handed, (std::vector<int64_t>{0, 0, 16}));
  layer.written = {false};
  held = heldGradients({layer, transpose}, {16});
  EXPECT_EQ(held.handed, (std::vector<int64_t>{0, 16, 16}));
}

// A step hands the dense layer (stage 1) slices of the cat's gradient (stage 2, 40 bytes, four
// slices). Autograd cannot add into a slice whose storage the others hold: the two B(1) wrote
// into are new tensors of their own size, beside the whole, still held by the two passed on.
TEST(StorageSharing, ASliceWrittenInPlaceIsMadeAnewWhereOthersHoldItsStorage) {
  GradientSources cat{{-1, -1, -1, -1}, {0, 0, 0, 0}, {40}, {10, 10, 10, 10}, {}, {}};
  GradientSources layer{{0, 1, 2, 3},     {-1, -1, -1, -1},           {},
                        {10, 10, 10, 10}, {true, true, false, false}, {}};
  HeldGradients held = heldGradients({layer, cat}, {100});
  EXPECT_EQ(held.wd, (std::vector<int64_t>{40 + 10 + 10, 40}));
  EXPECT_EQ(held.handed, (std::vector<int64_t>{0, 40, 0}));
  // Handed a gradient of its own (the chain's output gradient, 40 bytes), the same B adds into
  // it in place, as measured.
  GradientSources whole{{0}, {-1}, {}, {40}, {true}, {}};
  held = heldGradients({whole}, {40});
  EXPECT_EQ(held.wd, (std::vector<int64_t>{40}));
  EXPECT_EQ(held.handed, (std::vector<int64_t>{0, 40}));
}

// A step hands stage 1 a slice of the cat's gradient (stage 2, 40 bytes, two slices of 20) for
// its second output. B(1) adds a use of its own into it (in place in the profile, handed ones of
// their own) and hands on a view of the sum (a cat of its own, sliced). Out of place in a step,
// the sum is a new tensor of the slice's size, and the view B hands on holds all of it.
TEST(StorageSharing, AViewOfASumMadeOutOfPlaceHoldsTheWholeSum) {
  GradientSources cat{{-1, -1}, {0, 0}, {40}, {20, 20}, {}, {}};
  GradientSources layer{{-1, 1}, {0, -1}, {12}, {12, 8}, {false, true}, {false, true}};
  const HeldGradients held = heldGradients({layer, cat}, {40});
  EXPECT_EQ(held.wd, (std::vector<int64_t>{12 + 20, 40}));
  EXPECT_EQ(held.handed, (std::vector<int64_t>{0, 0, 0}));  // none shared from delta to delta
}

}  // namespace
}  // namespace jitckpt
