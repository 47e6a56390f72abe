// Profiler on small chains whose costs follow from autograd's rules: sizes of outputs, saved
// tensors and gradients are known in advance; memory values are deterministic; model state
// (BatchNorm buffers, the random generator) is left as it was.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/script.h>

#include "passes/partition/module.h"
#include "planner/profile.h"
#include "runtime/probes/stopwatch.h"
#include "solver/baselines.h"
#include "solver/costs.h"
#include "solver/simulator.h"

namespace jitckpt {
namespace {

constexpr int64_t kFloat = sizeof(float);
constexpr int64_t kBatch = 8;

// x[8,32] -mm-> [8,64] -relu-> | -mm-> [8,16] -sin-> | -mm-> [8,48] -tanh->
// relu and tanh save their output; sin saves its input (the mm output) besides its output.
torch::jit::Module knownChain() {
  torch::manual_seed(0);
  torch::jit::Module m("KnownChain");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w1", (torch::randn({32, 64})).requires_grad_(), false);
  m.register_parameter("w2", (torch::randn({64, 16})).requires_grad_(), false);
  m.register_parameter("w3", (torch::randn({16, 48})).requires_grad_(), false);
  m.define(R"(
    def forward(self, x):
        a = torch.relu(torch.mm(x, self.w1))
        b = torch.sin(torch.mm(a, self.w2))
        return torch.tanh(torch.mm(b, self.w3))
  )");
  return m;
}

ProfileOptions quiet(int repeats = 2) {
  ProfileOptions options;
  options.repeats = repeats;
  options.progress = [](int, int) {};
  return options;
}

ChainProfile profileKnownChain(bool input_requires_grad) {
  torch::jit::Module m = knownChain();
  Partition partition = partitionModule(m);
  EXPECT_EQ(partition.stages.size(), 3u) << "the test expects a cut after relu and after sin";
  auto x = torch::randn({kBatch, 32}).requires_grad_(input_requires_grad);
  return profileChain(m, partition, {x}, quiet());
}

TEST(ProfileChain, SizesFollowFromTheOps) {
  const ChainProfile p = profileKnownChain(false);
  ASSERT_EQ(p.costs.length(), 4);  // three stages and the terminal one
  const solver::Costs& c = p.costs;
  EXPECT_EQ(c.wa, (std::vector<int64_t>{kBatch * 32 * kFloat, kBatch * 64 * kFloat,
                                        kBatch * 16 * kFloat, kBatch * 48 * kFloat, 0}));
  // abar: relu keeps its output; sin keeps its input and output; tanh keeps its output.
  EXPECT_EQ(c.wabar, (std::vector<int64_t>{0, kBatch * 64 * kFloat, 2 * kBatch * 16 * kFloat,
                                           kBatch * 48 * kFloat, 0}));
  // delta^0 is not needed (x does not require grad); delta^l has the size of a^l.
  EXPECT_EQ(c.wd, (std::vector<int64_t>{0, kBatch * 64 * kFloat, kBatch * 16 * kFloat,
                                        kBatch * 48 * kFloat, 0}));
  // Forward overheads: the mm output lives beside the activation's output in both kinds of run;
  // for sin the recording run saves it (part of abar, no overhead), while the no-grad run holds
  // it as a transient and frees it afterwards.
  EXPECT_EQ(c.of, (std::vector<int64_t>{0, kBatch * 64 * kFloat, 0, kBatch * 48 * kFloat, 0}));
  EXPECT_EQ(c.of_nograd, (std::vector<int64_t>{0, kBatch * 64 * kFloat, kBatch * 16 * kFloat,
                                               kBatch * 48 * kFloat, 0}));
  EXPECT_EQ(p.labels.size(), 5u);
  EXPECT_EQ(p.labels.front(), "input");
  EXPECT_EQ(p.labels.back(), "loss");
}

// x[8,32] -mm-> -relu-> a[8,64] | -mm-> h[8,128] -sum over halves-> b[8,64], a passed through |
// -mm-> + a -tanh->
TEST(ProfileChain, NoGradOverheadIsAboveTheBytesTheStageMade) {
  torch::manual_seed(0);
  torch::jit::Module m("PassesThrough");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w1", torch::randn({32, 64}).requires_grad_(), false);
  m.register_parameter("w2", torch::randn({64, 128}).requires_grad_(), false);
  m.register_parameter("w3", torch::randn({64, 64}).requires_grad_(), false);
  m.define(R"(
    def forward(self, x):
        a = torch.relu(torch.mm(x, self.w1))
        b = torch.mm(a, self.w2).view(8, 2, 64).sum(1)
        return torch.tanh(torch.mm(b, self.w3) + a)
  )");
  Partition partition = partitionModule(m);
  ASSERT_EQ(partition.stages.size(), 3u) << "the test expects a cut after relu and after sum";
  const ChainProfile p = profileChain(m, partition, {torch::randn({kBatch, 32})}, quiet());
  // F∅(2) holds h while sum makes b; a, which it passes through, was held before it ran.
  EXPECT_EQ(p.costs.of_nograd[2], kBatch * 128 * kFloat);
}

TEST(ProfileChain, InputGradientWhenTheInputRequiresGrad) {
  const ChainProfile p = profileKnownChain(true);
  EXPECT_EQ(p.costs.wd[0], kBatch * 32 * kFloat);
  EXPECT_EQ(p.stages[0].parameter_grad_bytes, 32 * 64 * kFloat);
  EXPECT_EQ(p.stages[1].parameter_grad_bytes, 64 * 16 * kFloat);
}

TEST(ProfileChain, ValuesAreValidAndNonNegative) {
  const ChainProfile p = profileKnownChain(true);
  EXPECT_NO_THROW(solver::validate(p.costs));
  const solver::Costs& c = p.costs;
  for (int l = 1; l <= 3; ++l) {
    SCOPED_TRACE(l);
    EXPECT_GE(c.wabar[l], c.wa[l]);
    EXPECT_GE(c.of[l], 0);
    EXPECT_GE(c.of_nograd[l], 0);
    EXPECT_GE(c.ob[l], 0);
    EXPECT_GT(c.uf[l], 0);
    EXPECT_GT(c.ub[l], 0);
  }
  EXPECT_EQ(c.uf[4] + c.ub[4] + c.wa[4] + c.wabar[4] + c.wd[4] + c.of[4] + c.ob[4], 0);
}

TEST(ProfileChain, MemoryValuesAreDeterministic) {
  const ChainProfile first = profileKnownChain(true);
  const ChainProfile second = profileKnownChain(true);
  EXPECT_EQ(first.costs.wa, second.costs.wa);
  EXPECT_EQ(first.costs.wabar, second.costs.wabar);
  EXPECT_EQ(first.costs.wd, second.costs.wd);
  EXPECT_EQ(first.costs.of, second.costs.of);
  EXPECT_EQ(first.costs.of_nograd, second.costs.of_nograd);
  EXPECT_EQ(first.costs.ob, second.costs.ob);
  EXPECT_EQ(first.measured_unconstrained_peak, second.measured_unconstrained_peak);
}

TEST(ProfileChain, MeasuredUnconstrainedPeakMatchesTheSimulator) {
  // Running Fall(1..3), B(3..1) for real peaks exactly where the simulator says from the same
  // costs: each forward kind is charged its own overhead (stage 2's no-grad overhead, the sin
  // input, would be 512 bytes too many for its recording forward).
  const ChainProfile p = profileKnownChain(true);
  ASSERT_GT(p.measured_unconstrained_peak, 0);
  EXPECT_EQ(p.measured_unconstrained_peak, p.unconstrained_peak);
}

// Stage times are scaled by one factor so that the model's time of the no-checkpointing schedule
// is the median of that schedule's measured runs; the stage profiles keep what was measured.
TEST(ProfileChain, StageTimesAreCalibratedOnTheWholeSchedule) {
  torch::jit::Module m = knownChain();
  const auto x = torch::randn({kBatch, 32});
  const ChainProfile p = profileChain(m, partitionModule(m), {x}, quiet(3));
  ASSERT_GT(p.measured_unconstrained_ms, 0);
  // Three timed runs (after an untimed one), their median the measured time.
  ASSERT_EQ(p.unconstrained_run_ms.size(), 3u);
  EXPECT_EQ(p.measured_unconstrained_ms, probes::median(p.unconstrained_run_ms));
  ASSERT_GE(p.time_scale, 0.5);
  ASSERT_LE(p.time_scale, 2.0);
  for (int l = 1; l <= 3; ++l) {
    const StageProfile& s = p.stages[static_cast<size_t>(l - 1)];
    EXPECT_DOUBLE_EQ(p.costs.uf[l], s.forward_ms * p.time_scale) << l;
    EXPECT_DOUBLE_EQ(p.costs.noGradForward(l), s.forward_no_grad_ms * p.time_scale) << l;
    EXPECT_DOUBLE_EQ(p.costs.ub[l], s.backward_ms * p.time_scale) << l;
  }
  const double modelled = solver::simulate(p.costs, solver::noCheckpointSchedule(p.costs)).time;
  if (p.time_scale > 0.5 && p.time_scale < 2.0) {
    EXPECT_NEAR(modelled, p.measured_unconstrained_ms, 1e-9 * p.measured_unconstrained_ms);
  }
  ProfileOptions uncalibrated = quiet(3);
  uncalibrated.calibration_runs = 0;
  const ChainProfile raw = profileChain(m, partitionModule(m), {x}, uncalibrated);
  EXPECT_EQ(raw.time_scale, 1.0);
  EXPECT_EQ(raw.measured_unconstrained_ms, -1);
  EXPECT_TRUE(raw.unconstrained_run_ms.empty());
  EXPECT_DOUBLE_EQ(raw.costs.uf[1], raw.stages[0].forward_ms);
}

// A chain whose unconstrained peak passes whole_schedule_room is not run whole: its peak stays
// unmeasured and its times unscaled; with room for it, it is run.
TEST(ProfileChain, RunsTheWholeScheduleOnlyWhereItFits) {
  torch::jit::Module m = knownChain();
  const auto x = torch::randn({kBatch, 32});
  ProfileOptions options = quiet(3);
  options.whole_schedule_room = 1;
  const ChainProfile tight = profileChain(m, partitionModule(m), {x}, options);
  EXPECT_GT(tight.unconstrained_peak, 1);
  EXPECT_EQ(tight.measured_unconstrained_peak, -1);
  EXPECT_EQ(tight.measured_unconstrained_ms, -1);
  EXPECT_TRUE(tight.unconstrained_run_ms.empty());
  EXPECT_EQ(tight.time_scale, 1.0);
  EXPECT_DOUBLE_EQ(tight.costs.uf[1], tight.stages[0].forward_ms);
  options.whole_schedule_room = tight.unconstrained_peak;
  const ChainProfile roomy = profileChain(m, partitionModule(m), {x}, options);
  EXPECT_EQ(roomy.measured_unconstrained_peak, roomy.unconstrained_peak);
  EXPECT_EQ(roomy.unconstrained_run_ms.size(), 3u);
}

// One stage with two weights that dwarf its activations: x[4,256] -mm w1-> -mm w2-> -relu->.
torch::jit::Module twoWeightStage() {
  torch::manual_seed(0);
  torch::jit::Module m("TwoWeights");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w1", torch::randn({256, 256}).requires_grad_(), false);
  m.register_parameter("w2", torch::randn({256, 256}).requires_grad_(), false);
  m.define(R"(
    def forward(self, x):
        return torch.relu(torch.mm(torch.mm(x, self.w1), self.w2))
  )");
  return m;
}

TEST(ProfileChain, BackwardOverheadHoldsTheStagesParameterGradients) {
  // B returns both weights' gradients (the executor hands them to autograd at the end of the
  // chain's backward), so both are alive when B ends.
  torch::jit::Module m = twoWeightStage();
  PartitionOptions one_stage;
  one_stage.max_stages = 1;
  const ChainProfile p =
      profileChain(m, partitionModule(m, one_stage), {torch::randn({4, 256})}, quiet());
  ASSERT_EQ(p.stages.size(), 1u);
  const int64_t weight = 256 * 256 * kFloat;
  EXPECT_EQ(p.stages[0].parameter_grad_bytes, 2 * weight);
  EXPECT_GT(p.costs.ob[1], 3 * weight / 2);  // both, less what B frees of the stage on the way
}

TEST(ProfileChain, ParameterGradientsAreLeftAsTheyWere) {
  torch::jit::Module m = twoWeightStage();
  at::Tensor w1 = m.attr("w1").toTensor(), w2 = m.attr("w2").toTensor();
  w2.mutable_grad() = torch::full({256, 256}, 3.0f);
  const at::Tensor w2_grad = w2.grad();
  profileChain(m, partitionModule(m), {torch::randn({4, 256})}, quiet());
  EXPECT_FALSE(w1.grad().defined());
  EXPECT_TRUE(w2.grad().is_same(w2_grad));
  EXPECT_TRUE(torch::equal(w2.grad(), torch::full({256, 256}, 3.0f)));
}

TEST(ProfileChain, ProgressReportsEveryStage) {
  torch::jit::Module m = knownChain();
  Partition partition = partitionModule(m);
  std::vector<std::pair<int, int>> calls;
  ProfileOptions options = quiet(1);
  options.progress = [&](int stage, int total) { calls.emplace_back(stage, total); };
  profileChain(m, partition, {torch::randn({kBatch, 32})}, options);
  const int L = static_cast<int>(partition.stages.size());
  ASSERT_EQ(calls.size(), static_cast<size_t>(L));
  for (int l = 1; l <= L; ++l) EXPECT_EQ(calls[l - 1], std::make_pair(l, L));
}

TEST(ProfileChain, WrongExampleInputsSayWhatWasExpected) {
  torch::jit::Module m = knownChain();
  Partition partition = partitionModule(m);
  try {
    profileChain(m, partition, {torch::randn({kBatch, 32}), torch::randn({1})}, quiet(1));
    FAIL() << "two inputs for a forward that takes one";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward takes 1 input"), std::string::npos) << e.what();
  }
}

// BatchNorm written the way TorchScript sees nn.BatchNorm (an If on training around
// num_batches_tracked.add_, running statistics updated by batch_norm), followed by dropout.
torch::jit::Module batchNormDropoutChain() {
  torch::manual_seed(1);
  torch::jit::Module m("BatchNormDropout");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w1", (torch::randn({16, 32})).requires_grad_(), false);
  m.register_parameter("gamma", (torch::rand({32}) + 0.5).requires_grad_(), false);
  m.register_parameter("beta", (torch::randn({32})).requires_grad_(), false);
  m.register_buffer("running_mean", torch::rand({32}));
  m.register_buffer("running_var", torch::rand({32}) + 0.5);
  m.register_buffer("num_batches_tracked", torch::tensor(3, torch::kLong));
  m.register_parameter("w2", (torch::randn({32, 8})).requires_grad_(), false);
  m.register_parameter("w3", (torch::randn({8, 4})).requires_grad_(), false);
  m.define(R"(
    def forward(self, x):
        y = torch.mm(x, self.w1)
        if self.training:
            self.num_batches_tracked.add_(1)
        y = torch.batch_norm(y, self.gamma, self.beta, self.running_mean, self.running_var,
                             self.training, 0.1, 1e-5, False)
        y = torch.dropout(torch.relu(y), 0.5, self.training)
        y = torch.dropout(torch.tanh(torch.mm(y, self.w2)), 0.5, self.training)
        return torch.mm(y, self.w3)
  )");
  m.train();
  return m;
}

TEST(ProfileChain, LeavesBatchNormBuffersAndRandomStateUnchanged) {
  torch::jit::Module m = batchNormDropoutChain();
  Partition partition = partitionModule(m);
  ASSERT_GE(partition.stages.size(), 2u);
  bool any_mutation = false;
  for (const Stage& s : partition.stages) any_mutation = any_mutation || !s.mutated_lifted.empty();
  ASSERT_TRUE(any_mutation) << "the partition should mark the BatchNorm buffers as mutated";

  std::vector<torch::Tensor> buffers_before;
  for (const auto& b : m.named_buffers()) buffers_before.push_back(b.value.clone());
  const torch::Tensor x = torch::randn({kBatch, 16});
  auto generator = at::detail::getDefaultCPUGenerator();
  torch::Tensor rng_before;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    rng_before = generator.get_state();
  }
  const ChainProfile p = profileChain(m, partition, {x}, quiet(3));
  EXPECT_GT(p.costs.wa[1], 0);

  size_t i = 0;
  for (const auto& b : m.named_buffers()) {
    SCOPED_TRACE(b.name);
    EXPECT_TRUE(torch::equal(b.value, buffers_before[i++]));
  }
  // The raw state tensor need not round-trip bit for bit (unused fields); the numbers drawn next
  // must be those that would have been drawn without profiling.
  const torch::Tensor after_profile = torch::randn({64});
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng_before);
  }
  const torch::Tensor without_profile = torch::randn({64});
  EXPECT_TRUE(torch::equal(after_profile, without_profile));
}

}  // namespace
}  // namespace jitckpt
