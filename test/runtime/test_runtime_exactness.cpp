// Exactness of the runtime: a rewritten model trains bit-identically to the unmodified scripted
// model (run with graph executor optimization off, see test_runtime_support.h) under every kind
// of schedule: outputs, input and parameter gradients, BatchNorm running statistics and
// num_batches_tracked, the random generator after the step; in train() and eval().
#include "test/runtime/test_runtime_support.h"

namespace jitckpt::test {
namespace {

using Param = std::tuple<std::string, ScheduleKind>;

class ScheduleExactness : public ::testing::TestWithParam<Param> {};

TEST_P(ScheduleExactness, TrainingStepsAreBitIdentical) {
  const auto& [model, kind] = GetParam();
  ReferenceExecutorGuard reference_executor;
  torch::jit::Module reference = loadFixture(model);
  Rewritten rewritten = rewriteWith(loadFixture(model), kind);
  ASSERT_GE(rewritten.plan->numStages(), 3) << "the fixture should cut into several stages";
  if (kind == ScheduleKind::OptimalMin || kind == ScheduleKind::Revolve) {
    ASSERT_TRUE(hasRecomputation(*rewritten.plan))
        << "the schedule under test recomputes nothing:\n"
        << rewritten.plan->str();
  }
  torch::manual_seed(7);
  const at::Tensor input = torch::randn(inputShape(model));
  expectSameTraining(reference, rewritten.module, input, /*steps=*/3, model + "/" + toString(kind));
}

const ScheduleKind kAllKinds[] = {ScheduleKind::None,       ScheduleKind::Periodic2,
                                  ScheduleKind::Periodic3,  ScheduleKind::Revolve,
                                  ScheduleKind::OptimalMin, ScheduleKind::OptimalMid,
                                  ScheduleKind::OptimalHigh};

INSTANTIATE_TEST_SUITE_P(SmallModels, ScheduleExactness,
                         ::testing::Combine(::testing::Values("tiny_resnet", "dropout_mlp",
                                                              "shared_parameter"),
                                            ::testing::ValuesIn(kAllKinds)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::get<0>(info.param) + "_" + toString(std::get<1>(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(TorchvisionResNet18, ScheduleExactness,
                         ::testing::Combine(::testing::Values("resnet18"),
                                            ::testing::Values(ScheduleKind::None,
                                                              ScheduleKind::OptimalMin,
                                                              ScheduleKind::Periodic3)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::get<0>(info.param) + "_" + toString(std::get<1>(info.param));
                         });

// BatchNorm statistics are updated once per step although stages that update them run again.
TEST(RuntimeExactness, BatchNormStatisticsUpdatedOncePerStep) {
  ReferenceExecutorGuard reference_executor;
  torch::jit::Module reference = loadFixture("tiny_resnet");
  Rewritten rewritten = rewriteWith(loadFixture("tiny_resnet"), ScheduleKind::Revolve);
  // The schedule must recompute a stage that updates buffers, or this test proves nothing.
  const solver::Schedule& schedule = rewritten.plan->solution().schedule;
  std::vector<int> forward_runs(rewritten.plan->numStages() + 2, 0);
  bool recomputes_buffer_stage = false;
  for (const auto& op : schedule) {
    if (op.kind == solver::OpKind::Backward || op.stage > rewritten.plan->numStages()) continue;
    if (++forward_runs[op.stage] > 1 &&
        !rewritten.plan->stages().stage(op.stage).mutated_lifted.empty()) {
      recomputes_buffer_stage = true;
    }
  }
  ASSERT_TRUE(recomputes_buffer_stage) << rewritten.plan->str();
  torch::manual_seed(3);
  const at::Tensor input = torch::randn(inputShape("tiny_resnet"));
  expectSameTraining(reference, rewritten.module, input, /*steps=*/4, "tiny_resnet revolve");
  // num_batches_tracked counted steps, not stage runs.
  for (const auto& b : rewritten.module.named_buffers()) {
    if (b.name.find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(b.value.item<int64_t>(), 4) << b.name;
    }
  }
}

// Dropout draws the same mask when its stage is recomputed.
TEST(RuntimeExactness, DropoutReplaysItsRandomState) {
  ReferenceExecutorGuard reference_executor;
  torch::jit::Module reference = loadFixture("dropout_mlp");
  Rewritten rewritten = rewriteWith(loadFixture("dropout_mlp"), ScheduleKind::Revolve);
  bool recomputes_random_stage = false;
  std::vector<int> forward_runs(rewritten.plan->numStages() + 2, 0);
  for (const auto& op : rewritten.plan->solution().schedule) {
    if (op.kind == solver::OpKind::Backward || op.stage > rewritten.plan->numStages()) continue;
    if (++forward_runs[op.stage] > 1 && rewritten.plan->stages().hasRandomOps(op.stage)) {
      recomputes_random_stage = true;
    }
  }
  ASSERT_TRUE(recomputes_random_stage) << rewritten.plan->str();
  torch::manual_seed(3);
  const at::Tensor input = torch::randn(inputShape("dropout_mlp"));
  expectSameTraining(reference, rewritten.module, input, /*steps=*/3, "dropout_mlp revolve");
}

// A boundary written in place by the next stage (the partition's cut moving turned off, so the
// writing stages are marked): stored checkpoints and recorded graphs stay intact.
TEST(RuntimeExactness, InPlaceWritesNeverCorruptACheckpoint) {
  PartitionOptions keep_cuts;
  keep_cuts.move_cuts_off_inplace_writes = false;
  for (ScheduleKind kind : {ScheduleKind::None, ScheduleKind::Revolve, ScheduleKind::OptimalMin,
                            ScheduleKind::OptimalMid, ScheduleKind::Periodic2}) {
    SCOPED_TRACE(toString(kind));
    ReferenceExecutorGuard reference_executor;
    torch::jit::Module reference = loadFixture("inplace_boundary");
    Rewritten rewritten = rewriteWith(loadFixture("inplace_boundary"), kind, keep_cuts);
    int writers = 0;
    for (const auto& s : rewritten.plan->stages().stages()) writers += s.writes_activation_input;
    ASSERT_GE(writers, 1)
        << "no stage writes its input: the fixture does not test in-place writes\n"
        << rewritten.plan->str();
    torch::manual_seed(5);
    const at::Tensor input = torch::randn(inputShape("inplace_boundary"));
    expectSameTraining(reference, rewritten.module, input, /*steps=*/2,
                       "inplace_boundary " + toString(kind));
  }
}

// A parameter read by two stages gets the sum of both stages' gradients.
TEST(RuntimeExactness, SharedParameterGradientIsSummed) {
  ReferenceExecutorGuard reference_executor;
  torch::jit::Module reference = loadFixture("shared_parameter");
  Rewritten rewritten = rewriteWith(loadFixture("shared_parameter"), ScheduleKind::OptimalMin);
  // Find the lifted value of shared.weight and check two stages read it.
  std::vector<std::string> names;
  for (const auto& l : rewritten.plan->stages().lifted()) names.push_back(l.name);
  const auto it = std::find(names.begin(), names.end(), "shared.weight");
  ASSERT_NE(it, names.end());
  const size_t index = static_cast<size_t>(it - names.begin());
  int readers = 0;
  for (const auto& s : rewritten.plan->stages().stages())
    readers += std::count(s.lifted.begin(), s.lifted.end(), index) > 0;
  ASSERT_EQ(readers, 2) << rewritten.plan->str();
  torch::manual_seed(9);
  const at::Tensor input = torch::randn(inputShape("shared_parameter"));
  expectSameTraining(reference, rewritten.module, input, /*steps=*/3, "shared_parameter");
}

// eval() switches the lifted `training` flag: running statistics are read, not updated; dropout
// is off; gradients are still exact. Then back to train().
TEST(RuntimeExactness, TrainAndEvalModes) {
  for (const std::string model : {"tiny_resnet", "dropout_mlp"}) {
    SCOPED_TRACE(model);
    ReferenceExecutorGuard reference_executor;
    torch::jit::Module reference = loadFixture(model);
    Rewritten rewritten = rewriteWith(loadFixture(model), ScheduleKind::OptimalMin);
    torch::manual_seed(11);
    const at::Tensor input = torch::randn(inputShape(model));
    reference.eval();
    rewritten.module.eval();
    expectSameTraining(reference, rewritten.module, input, 2, model + " eval");
    reference.train();
    rewritten.module.train();
    expectSameTraining(reference, rewritten.module, input, 2, model + " train");
  }
}

// An input that does not require grad (the usual case: images) and frozen parameters.
TEST(RuntimeExactness, PartlyFrozenParameters) {
  ReferenceExecutorGuard reference_executor;
  torch::jit::Module reference = loadFixture("tiny_resnet");
  Rewritten rewritten = rewriteWith(loadFixture("tiny_resnet"), ScheduleKind::OptimalMid);
  for (torch::jit::Module* m : {&reference, &rewritten.module}) {
    for (const auto& p : m->named_parameters()) {
      if (p.name.rfind("stem.", 0) == 0 || p.name.rfind("blocks.1.", 0) == 0)
        p.value.requires_grad_(false);
    }
  }
  torch::manual_seed(13);
  const at::Tensor input = torch::randn(inputShape("tiny_resnet"));
  auto step = [&](torch::jit::Module& m) {
    for (auto p : m.parameters()) p.mutable_grad() = at::Tensor();
    at::Tensor out = m.forward({input}).toTensor();
    (out * out).sum().backward();
    NamedTensors r{{"output", out.detach()}};
    for (const auto& p : m.named_parameters()) r.emplace_back(p.name + ".grad", p.value.grad());
    for (const auto& b : m.named_buffers()) r.emplace_back(b.name, b.value.clone());
    return r;
  };
  expectIdentical(step(reference), step(rewritten.module), "frozen stem");
}

// With the optimizing executor on, the reference's DifferentiableGraphs round differently from
// eager autograd; the rewritten model, whose stages run eagerly, still agrees to rounding.
TEST(RuntimeExactness, OptimizingExecutorAgreesToRounding) {
  ReferenceExecutorGuard optimizing(/*optimize=*/true);
  torch::jit::Module reference = loadFixture("shared_parameter");
  Rewritten rewritten = rewriteWith(loadFixture("shared_parameter"), ScheduleKind::OptimalMin);
  torch::manual_seed(17);
  const at::Tensor input = torch::randn(inputShape("shared_parameter"));
  for (int step = 0; step < 3; ++step) {
    const NamedTensors expected = trainingStep(reference, input, 50 + step);
    const NamedTensors actual = trainingStep(rewritten.module, input, 50 + step);
    ASSERT_EQ(expected.size(), actual.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      if (!expected[i].second.defined()) continue;
      EXPECT_TRUE(torch::allclose(expected[i].second, actual[i].second, 1e-5, 1e-6))
          << expected[i].first;
    }
  }
}

}  // namespace
}  // namespace jitckpt::test
