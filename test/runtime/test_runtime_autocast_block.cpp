// jitckpt::autocast_block: a block's ops run under the autocast state it sets (autocast off inside
// the caller's bfloat16 autocast gives float32 results, on inside a call without autocast
// bfloat16 ones), the caller's state comes back after, and autograd records the block's ops.
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include <optional>

#include "runtime/autocast_block.h"
#include "runtime/compat.h"

namespace jitckpt {
namespace {

std::shared_ptr<torch::jit::Graph> mmTanhBlock() {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%a : Tensor, %b : Tensor):
  %c : Tensor = aten::mm(%a, %b)
  %d : Tensor = aten::tanh(%c)
  %out : Tensor[] = prim::ListConstruct(%d)
  return (%out))IR",
                      graph.get());
  return graph;
}

at::Tensor runBlock(int64_t block, const at::Tensor& a, const at::Tensor& b) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("jitckpt::autocast_block", "");
  torch::jit::Stack stack{c10::IValue(block), c10::IValue(std::vector<at::Tensor>{a, b})};
  op.callBoxed(&stack);
  return stack.at(0).toTensorVector().at(0);
}

AutocastState withCpuAutocast(bool enabled) {
  AutocastState state = AutocastState::current();
  state.cpu = enabled;
  state.cpu_dtype = at::kBFloat16;
  return state;
}

// Runs `body` under the CPU autocast state `state`, the caller's put back after.
template <typename Body>
void under(const AutocastState& state, Body body) {
  const AutocastState saved = AutocastState::current();
  state.makeCurrent();
  body();
  saved.makeCurrent();
}

TEST(AutocastBlock, AutocastOffInsideTheCallersAutocast) {
  const int64_t off = registerAutocastBlock(
      mmTanhBlock(), {c10::DeviceType::CPU, /*enabled=*/false, std::nullopt, std::nullopt});
  torch::manual_seed(0);
  const auto a = torch::randn({4, 8}, torch::requires_grad());
  const auto b = torch::randn({8, 3}, torch::requires_grad());
  const auto expected = torch::tanh(torch::mm(a, b));
  const auto expected_grads = torch::autograd::grad({expected.sum()}, {a, b});
  at::Tensor got;
  under(withCpuAutocast(true), [&] {
    ASSERT_EQ(torch::mm(a, b).scalar_type(), at::kBFloat16);  // what the block must not do
    got = runBlock(off, a, b);
    EXPECT_TRUE(AutocastState::current().cpu) << "the caller's autocast was not put back";
  });
  ASSERT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_TRUE(torch::equal(got, expected));
  // Backward outside autocast, as a training loop calls it: the recorded ops are float32 ones.
  const auto grads = torch::autograd::grad({got.sum()}, {a, b});
  EXPECT_TRUE(torch::equal(grads[0], expected_grads[0]));
  EXPECT_TRUE(torch::equal(grads[1], expected_grads[1]));
}

TEST(AutocastBlock, AutocastOnInsideACallWithout) {
  const int64_t on = registerAutocastBlock(
      mmTanhBlock(), {c10::DeviceType::CPU, /*enabled=*/true, at::kBFloat16, std::nullopt});
  torch::manual_seed(1);
  const auto a = torch::randn({4, 8});
  const auto b = torch::randn({8, 3});
  at::Tensor expected;
  under(withCpuAutocast(true), [&] { expected = torch::tanh(torch::mm(a, b)); });
  under(withCpuAutocast(false), [&] {
    const auto got = runBlock(on, a, b);
    EXPECT_FALSE(AutocastState::current().cpu) << "the caller's autocast was not put back";
    ASSERT_EQ(got.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(torch::equal(got, expected));
  });
}

TEST(AutocastBlock, AnUnknownBlockSaysToCaptureAgain) {
  try {
    runBlock(1 << 30, torch::ones({1, 1}), torch::ones({1, 1}));
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("capture the model again"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace jitckpt
