// Profiler on the scripted fixture models (test/models/fixtures.py): a small ResNet with
// BatchNorm and in-place relu_/add_, and torchvision's resnet18. The measured no-checkpointing
// peak must be the simulator's from the same costs; memory values repeat exactly; buffers stay.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "passes/partition/module.h"
#include "planner/profile.h"
#include "solver/costs.h"
#include "test/fixtures/fixture_path.h"

namespace jitckpt {
namespace {

// A fixture model in training mode and its partition; nothing where the fixture is not built.
struct TrainedFixture {
  torch::jit::Module module;
  Partition partition;
};

std::optional<TrainedFixture> loadTrained(const std::string& name) {
  const std::string path = test::fixture(name);
  if (path.empty()) return std::nullopt;
  torch::jit::Module m = torch::jit::load(path);
  m.train();
  Partition partition = partitionModule(m);
  return TrainedFixture{m, std::move(partition)};
}

ProfileOptions oneRepeatQuiet() {
  ProfileOptions options;
  options.repeats = 1;
  options.progress = [](int, int) {};
  return options;
}

// A re-plan's profile: sizes alone, without a warm-up run or a run of the whole schedule.
ProfileOptions sizesAlone() {
  ProfileOptions options = oneRepeatQuiet();
  options.time_stages = false;
  options.warmup = 0;
  options.measure_unconstrained_peak = false;
  return options;
}

// Every size two profiles measure, byte for byte.
void expectSameSizes(const ChainProfile& a, const ChainProfile& b) {
  for (auto field : {&solver::Costs::wa, &solver::Costs::wabar, &solver::Costs::wd,
                     &solver::Costs::of, &solver::Costs::of_nograd, &solver::Costs::ob,
                     &solver::Costs::wg, &solver::Costs::wd_handed})
    EXPECT_EQ(a.costs.*field, b.costs.*field);
  EXPECT_EQ(a.costs.spans, b.costs.spans);
  EXPECT_EQ(a.costs.held_output, b.costs.held_output);
}

void checkModel(const std::string& name, const torch::Tensor& x, size_t min_stages) {
  std::optional<TrainedFixture> fixture = loadTrained(name);
  if (!fixture) GTEST_SKIP() << name << ".pt not built (test/models/fixtures.py)";
  torch::jit::Module& m = fixture->module;
  const Partition& partition = fixture->partition;
  ASSERT_GE(partition.stages.size(), min_stages);
  std::vector<torch::Tensor> buffers;
  for (const auto& b : m.named_buffers()) buffers.push_back(b.value.clone());

  const ChainProfile first = profileChain(m, partition, {x}, oneRepeatQuiet());
  const ChainProfile second = profileChain(m, partition, {x}, oneRepeatQuiet());
  EXPECT_NO_THROW(solver::validate(first.costs));
  EXPECT_EQ(first.costs.length(), static_cast<int>(partition.stages.size()) + 1);
  EXPECT_EQ(first.costs.wa[0], x.numel() * x.element_size());
  for (int l = 1; l < first.costs.length(); ++l) {
    EXPECT_GT(first.costs.wa[l], 0) << l;
    EXPECT_GT(first.costs.uf[l], 0) << l;
  }
  EXPECT_EQ(first.costs.wa, second.costs.wa);
  EXPECT_EQ(first.costs.wabar, second.costs.wabar);
  EXPECT_EQ(first.costs.wd, second.costs.wd);
  EXPECT_EQ(first.costs.of, second.costs.of);
  EXPECT_EQ(first.costs.ob, second.costs.ob);
  EXPECT_EQ(first.costs.of_nograd, second.costs.of_nograd);
  // The no-checkpointing schedule run for real peaks where the simulator says: each forward kind
  // is charged its own overhead (charged the larger of the two, a recording forward was predicted
  // up to 384 KiB high on the tiny ResNet). abar counts the copies of the BatchNorm statistics
  // that a recomputation's graph saves, which this schedule's first runs do not make: the
  // prediction is above the measured peak by those of the stages whose abar is held at it.
  int64_t copies = 0;
  for (const StageProfile& s : first.stages) copies += s.written_copies_bytes;
  EXPECT_GT(copies, 0);
  EXPECT_LE(first.measured_unconstrained_peak, first.unconstrained_peak);
  EXPECT_LE(first.unconstrained_peak, first.measured_unconstrained_peak + copies);

  size_t i = 0;
  for (const auto& b : m.named_buffers())
    EXPECT_TRUE(torch::equal(b.value, buffers[i++])) << b.name;
}

// A re-plan measures sizes alone, without a warm-up run or a run of the whole schedule, on stages
// that ran at other sizes before (replanner.cpp): the first run at a new size holds what a run
// after a warm-up holds, and the gradients each B is handed are laid out as the whole run has
// them.
void checkSizesWithoutWarmUp(const std::string& name, const torch::Tensor& profiled,
                             const torch::Tensor& other) {
  std::optional<TrainedFixture> fixture = loadTrained(name);
  if (!fixture) GTEST_SKIP() << name << ".pt not built (test/models/fixtures.py)";
  torch::jit::Module& m = fixture->module;
  const Partition& partition = fixture->partition;
  profileChain(m, partition, {profiled}, oneRepeatQuiet());
  ProfileOptions sizes_only = sizesAlone();
  const ChainProfile first = profileChain(m, partition, {other}, sizes_only);
  ASSERT_FALSE(first.ran_unconstrained);
  sizes_only.warmup = 1;
  sizes_only.measure_unconstrained_peak = true;
  const ChainProfile warm = profileChain(m, partition, {other}, sizes_only);
  ASSERT_TRUE(warm.ran_unconstrained);
  for (auto field :
       {&solver::Costs::wa, &solver::Costs::wabar, &solver::Costs::wd, &solver::Costs::of,
        &solver::Costs::of_nograd, &solver::Costs::ob, &solver::Costs::wg})
    EXPECT_EQ(first.costs.*field, warm.costs.*field);
  EXPECT_NE(first.costs.wa, profileChain(m, partition, {profiled}, sizes_only).costs.wa);
}

TEST(ProfileModels, SizesWithoutWarmUpAtANewSize) {
  // (the tiny ResNet alone: on 2.14 each profile of resnet18 takes seconds)
  checkSizesWithoutWarmUp("tiny_resnet", torch::randn({4, 3, 32, 32}),
                          torch::randn({2, 3, 48, 40}));
}

// Twin stages (twin_stages.h) take the measurements of the first of them: resnet18's blocks
// within a layer, the MLP's dropout layers, and the layers that apply one shared Linear (whose
// gradient the chain sums), each gives the sizes that measuring every stage gives, byte for byte.
void checkTwins(const std::string& name, const torch::Tensor& x, int expected_twins) {
  std::optional<TrainedFixture> fixture = loadTrained(name);
  if (!fixture) GTEST_SKIP() << name << ".pt not built (test/models/fixtures.py)";
  torch::jit::Module& m = fixture->module;
  const Partition& partition = fixture->partition;
  ProfileOptions each = oneRepeatQuiet();
  each.twin_stages = false;
  const ChainProfile twins = profileChain(m, partition, {x}, oneRepeatQuiet());
  const ChainProfile alone = profileChain(m, partition, {x}, each);
  EXPECT_EQ(std::count_if(twins.twin_of.begin(), twins.twin_of.end(), [](int k) { return k > 0; }),
            expected_twins);
  EXPECT_EQ(std::count(alone.twin_of.begin(), alone.twin_of.end(), 0),
            static_cast<int64_t>(partition.stages.size()));
  expectSameSizes(twins, alone);
  EXPECT_EQ(twins.measured_unconstrained_peak, alone.measured_unconstrained_peak);
}

TEST(ProfileModels, TwinStagesMeasureAsEachAlone) {
  // (layer1's second block; the first stage of each MLP reads the chain input, which needs no
  // gradient, and the others an activation that does)
  checkTwins("resnet18", torch::randn({2, 3, 32, 32}), 1);
  checkTwins("dropout_mlp", torch::randn({8, 16}), 2);
  checkTwins("shared_parameter", torch::randn({8, 16}), 2);
}

// In a profile of sizes alone, twins whose outputs are made as the measured stage's lie (not run,
// twin_outputs.h) give the stages after them what running them gives, byte for byte.
void checkTwinOutputs(const std::string& name, const torch::Tensor& profiled,
                      const torch::Tensor& other, int expected_not_run) {
  std::optional<TrainedFixture> fixture = loadTrained(name);
  if (!fixture) GTEST_SKIP() << name << ".pt not built (test/models/fixtures.py)";
  torch::jit::Module& m = fixture->module;
  const Partition& partition = fixture->partition;
  profileChain(m, partition, {profiled}, oneRepeatQuiet());
  ProfileOptions run = sizesAlone();
  run.twin_outputs = false;
  const ChainProfile with = profileChain(m, partition, {other}, sizesAlone());
  const ChainProfile without = profileChain(m, partition, {other}, run);
  EXPECT_EQ(with.twins_not_run, expected_not_run);
  EXPECT_EQ(without.twins_not_run, 0);
  EXPECT_EQ(with.twin_of, without.twin_of);
  expectSameSizes(with, without);
}

TEST(ProfileModels, TwinOutputsMadeWithoutRunningGiveTheSameSizes) {
  // (tiny_llama: its four twins, which pass the rotary tables on and carry sizes as tensors;
  // resnet18: layer1's second block, whose scripted BatchNorm branches on its flags and sizes.)
  checkTwinOutputs("tiny_llama", torch::randint(0, 64, {2, 16}), torch::randint(0, 64, {3, 24}), 4);
  checkTwinOutputs("resnet18", torch::randn({2, 3, 32, 32}), torch::randn({3, 3, 40, 32}), 1);
  checkTwinOutputs("dropout_mlp", torch::randn({8, 16}), torch::randn({5, 16}), 2);
  checkTwinOutputs("shared_parameter", torch::randn({8, 16}), torch::randn({5, 16}), 2);
}

TEST(ProfileModels, TinyResNet) { checkModel("tiny_resnet", torch::randn({4, 3, 32, 32}), 3); }

TEST(ProfileModels, ResNet18) { checkModel("resnet18", torch::randn({2, 3, 32, 32}), 8); }

}  // namespace
}  // namespace jitckpt
