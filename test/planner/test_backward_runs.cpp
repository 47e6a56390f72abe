// StageRunner::backward of several stages in one autograd engine call, against one call per
// stage: the same gradients bit for bit, no higher peak, and joinsBackwardRun refusing what
// would change them (a recording made after the stage above's, a tensor the run already reads).
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/script.h>

#include "passes/partition/module.h"
#include "passes/prologue.h"
#include "runtime/probes/memory_probe.h"
#include "runtime/stage_runner.h"

namespace jitckpt {
namespace {

// Three stages; with `tied`, the last reads the first's weight again.
torch::jit::Module threeStages(bool tied) {
  torch::manual_seed(0);
  torch::jit::Module m("ThreeStages");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w1", torch::randn({32, 32}).requires_grad_(), false);
  m.register_parameter("w2", torch::randn({32, 32}).requires_grad_(), false);
  m.register_parameter("w3", torch::randn({32, 32}).requires_grad_(), false);
  m.define(std::string(R"(
    def forward(self, x):
        a = torch.relu(torch.mm(x, self.w1))
        b = torch.sin(torch.mm(a, self.w2))
        return torch.tanh(torch.mm(b, self.)") +
           (tied ? "w1" : "w3") + "))\n");
  return m;
}

// A wide first layer (the backward's peak is in its B), then three stages that read a float
// mask the first computes without gradient, through an op that saves its result (exp): nothing
// below needs the mask's gradient.
torch::jit::Module maskedStages() {
  torch::manual_seed(0);
  torch::jit::Module m("MaskedStages");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("wide", torch::randn({256, 4096}).requires_grad_(), false);
  m.register_parameter("back", torch::randn({4096, 256}).requires_grad_(), false);
  for (const char* w : {"w2", "w3", "w4"})
    m.register_parameter(w, torch::randn({256, 256}).requires_grad_(), false);
  m.define(R"(
    def forward(self, x):
        h = torch.mm(torch.tanh(torch.mm(x, self.wide)), self.back)
        mask = (h > 0).float()
        h = torch.tanh(torch.mm(h, self.w2)) + (mask * 0.5).exp()
        h = torch.tanh(torch.mm(h, self.w3)) + (mask * 0.5).exp()
        return torch.tanh(torch.mm(h, self.w4)) + (mask * 0.5).exp()
  )");
  return m;
}

struct Chain {
  std::shared_ptr<const ChainStages> stages;
  ChainArguments arguments;
};

Chain chainOf(torch::jit::Module m, int64_t rows, int64_t columns) {
  const Partition partition = partitionModule(m);
  EXPECT_GE(partition.stages.size(), 3u) << "the test expects a stage per layer";
  torch::manual_seed(1);
  const at::Tensor x = torch::randn({rows, columns}).requires_grad_();
  return {chainStagesOf(partition), runPrologue(m, partition, {x}).arguments};
}

Chain chainOf(bool tied) { return chainOf(threeStages(tied), 8, 32); }

std::vector<RecordedStage> recordAll(StageRunner& runner) {
  std::vector<RecordedStage> recorded;  // stage l at l - 1
  Tensors current = runner.arguments().inputs;
  for (int l = 1; l <= runner.numStages(); ++l) {
    recorded.push_back(runner.recordedForward(l, current));
    current = recorded.back().outputs;
  }
  return recorded;
}

Tensors outputGradients(const RecordedStage& last) {
  torch::manual_seed(2);
  Tensors grads;
  for (const auto& t : last.outputs) grads.push_back(torch::randn_like(t));
  return grads;
}

// The chain input's gradient, then each lifted tensor's (by first position); `peak`: the peak
// bytes of the backward above what was live before it.
Tensors gradients(const Chain& chain, bool one_call, probes::MemoryProbe* probe = nullptr,
                  int64_t* peak = nullptr) {
  StageRunner runner(chain.stages, chain.arguments, StageRunner::BufferWrites::FirstRunUpdates);
  std::vector<RecordedStage> recorded = recordAll(runner);
  Tensors delta = outputGradients(recorded.back());
  Tensors lifted(chain.arguments.lifted_tensors.size());
  auto collect = [&](StageGradients g) {
    for (auto& [position, gradient] : g.lifted) lifted[runner.firstPosition(position)] = gradient;
    delta = std::move(g.inputs);
  };
  const int64_t base = probe ? probe->resetPeak() : 0;
  if (one_call) {
    std::vector<RecordedStage> run(std::make_move_iterator(recorded.rbegin()),
                                   std::make_move_iterator(recorded.rend()));
    collect(runner.backward(std::move(run), std::move(delta), &lifted));
  } else {
    for (int l = runner.numStages(); l >= 1; --l)
      collect(runner.backward(l, std::move(recorded[l - 1]), std::move(delta), &lifted));
  }
  if (probe) *peak = probe->peakBytes() - base;
  Tensors out = delta;
  out.insert(out.end(), lifted.begin(), lifted.end());
  return out;
}

TEST(BackwardRuns, OneEngineCallGivesEveryGradientBitForBit) {
  const Chain chain = chainOf(/*tied=*/false);
  const Tensors separate = gradients(chain, /*one_call=*/false);
  const Tensors joined = gradients(chain, /*one_call=*/true);
  ASSERT_EQ(separate.size(), joined.size());
  size_t defined = 0;
  for (size_t i = 0; i < separate.size(); ++i) {
    ASSERT_EQ(separate[i].defined(), joined[i].defined()) << "gradient " << i;
    if (!separate[i].defined()) continue;
    ++defined;
    EXPECT_TRUE(torch::equal(separate[i], joined[i])) << "gradient " << i;
  }
  EXPECT_EQ(defined, 4u) << "the input's and three weights' gradients";
}

TEST(BackwardRuns, OneEngineCallHoldsNoMoreThanOnePerStage) {
  // The mask's gradient is taken in both (and dropped): its nodes run and free the exp results
  // they saved; if they did not run, one call would hold them all to its end.
  auto probe = probes::makeMemoryProbe(c10::Device(c10::kCPU));
  const Chain chain = chainOf(maskedStages(), 256, 256);
  int64_t separate = 0, joined = 0;
  const Tensors a = gradients(chain, /*one_call=*/false, probe.get(), &separate);
  const Tensors b = gradients(chain, /*one_call=*/true, probe.get(), &joined);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].defined(), b[i].defined()) << "gradient " << i;
    if (a[i].defined()) {
      EXPECT_TRUE(torch::equal(a[i], b[i])) << "gradient " << i;
    }
  }
  EXPECT_GT(separate, 0);
  // (the few bytes over: the sinks' numbers, one float each; the exp results are 256 KiB)
  EXPECT_LE(joined, separate + 64) << "one call per stage: " << separate << " bytes";
}

TEST(BackwardRuns, StagesRecordedInOrderJoin) {
  const Chain chain = chainOf(/*tied=*/false);
  StageRunner runner(chain.stages, chain.arguments, StageRunner::BufferWrites::FirstRunUpdates);
  std::vector<RecordedStage> recorded = recordAll(runner);
  const Tensors no_sums(chain.arguments.lifted_tensors.size());
  std::unordered_set<size_t> positions = runner.liftedPositions(recorded[2]);
  EXPECT_TRUE(runner.joinsBackwardRun(recorded[2], recorded[1], positions, no_sums));
  EXPECT_TRUE(runner.joinsBackwardRun(recorded[1], recorded[0], positions, no_sums));
  EXPECT_EQ(positions.size(), 3u);
}

TEST(BackwardRuns, ARecordingMadeAfterTheStageAboveDoesNotJoin) {
  const Chain chain = chainOf(/*tied=*/false);
  StageRunner runner(chain.stages, chain.arguments, StageRunner::BufferWrites::FirstRunUpdates);
  std::vector<RecordedStage> recorded = recordAll(runner);
  // Stage 2 again, recorded after stage 3: the engine, which runs the node made last first, would
  // start it before stage 3 is done.
  const RecordedStage again = runner.recordedForward(2, recorded[0].outputs);
  const Tensors no_sums(chain.arguments.lifted_tensors.size());
  std::unordered_set<size_t> positions = runner.liftedPositions(recorded[2]);
  EXPECT_FALSE(runner.joinsBackwardRun(recorded[2], again, positions, no_sums));
  EXPECT_EQ(positions.size(), 1u) << "a stage that does not join adds nothing";
}

TEST(BackwardRuns, AStageThatReadsATensorTheRunReadsOrHasASumDoesNotJoin) {
  const Chain chain = chainOf(/*tied=*/true);
  StageRunner runner(chain.stages, chain.arguments, StageRunner::BufferWrites::FirstRunUpdates);
  std::vector<RecordedStage> recorded = recordAll(runner);
  Tensors sums(chain.arguments.lifted_tensors.size());
  std::unordered_set<size_t> positions = runner.liftedPositions(recorded[2]);
  EXPECT_TRUE(runner.joinsBackwardRun(recorded[2], recorded[1], positions, sums));
  EXPECT_FALSE(runner.joinsBackwardRun(recorded[1], recorded[0], positions, sums))
      << "stage 1 reads w1, which stage 3 reads: its sum must come first";
  // A sum so far, from a B before the run, is taken by the run's first stage only.
  std::unordered_set<size_t> fresh = runner.liftedPositions(recorded[1]);
  for (size_t first : runner.liftedPositions(recorded[0])) sums[first] = torch::ones({32, 32});
  EXPECT_FALSE(runner.joinsBackwardRun(recorded[1], recorded[0], fresh, sums));
}

}  // namespace
}  // namespace jitckpt
