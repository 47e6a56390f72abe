// runAsBackward: the profiler's B runs inside a backward node of its own, as the executor's runs
// inside the chain's backward.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "runtime/stage_runner.h"

namespace {

TEST(RunAsBackward, RunsTheBodyOnceWithGradModeOffAsTheChainsBackward) {
  int runs = 0;
  bool grad_mode = true;
  jitckpt::runAsBackward(c10::Device(c10::kCPU), [&] {
    ++runs;
    grad_mode = c10::GradMode::is_enabled();
  });
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(grad_mode);
}

TEST(RunAsBackward, NestedGradientsEqualThoseTakenOutside) {
  const auto x = at::randn({4, 3}).requires_grad_();
  auto lossOf = [&] { return (x.sin() * x).sum(); };
  const at::Tensor outside = torch::autograd::grad({lossOf()}, {x})[0];
  at::Tensor inside;
  const at::Tensor loss = lossOf();  // recorded here: grad mode is off inside the node
  jitckpt::runAsBackward(c10::Device(c10::kCPU),
                         [&] { inside = torch::autograd::grad({loss}, {x})[0]; });
  ASSERT_TRUE(inside.defined());
  EXPECT_TRUE(at::equal(inside, outside));
}

TEST(RunAsBackward, AnErrorInsideArrivesWithItsMessage) {
  try {
    jitckpt::runAsBackward(c10::Device(c10::kCPU),
                           [] { TORCH_CHECK(false, "stage 7 (conv) failed: out of memory"); });
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 7 (conv) failed: out of memory"), std::string::npos)
        << e.what();
  }
}

}  // namespace
