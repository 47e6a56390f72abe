// CUDA check of the probes and the profiler, run by scripts/cuda-test.sh on a machine with a GPU:
// exact allocated-bytes deltas of the CUDA probe, CUDA-event timing, the profile of a chain with
// known sizes on CUDA, model state left alone (buffers, CUDA random state), and a rewritten
// training step whose measured peak stays within the limit and whose gradients match the
// unmodified model. Prints one line per check; exits 1 when any fails, 0 with "SKIPPED" when no
// GPU is visible or jitckpt was built without CUDA.
#include <torch/csrc/jit/api/module.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "passes/partition/module.h"
#include "passes/rewrite.h"
#include "planner/checkpoint.h"
#include "planner/profile.h"
#include "runtime/plan.h"
#include "runtime/probes/memory_probe.h"
#include "runtime/probes/stopwatch.h"

#ifdef JITCKPT_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

namespace {

int failures = 0;

void check(bool ok, const std::string& what, const std::string& detail = "") {
  std::printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.empty() ? "" : ": ",
              detail.c_str());
  if (!ok) ++failures;
}

std::string bytes(int64_t n) { return std::to_string(n) + " B"; }

// x[64,32] -mm-> [64,64] -relu-> | -mm-> [64,16] -sin-> | -mm-> [64,48] -tanh->; every tensor a
// multiple of 512 bytes, the caching allocator's block size, so that sizes are exact.
torch::jit::Module knownChain(bool batch_norm_and_dropout) {
  torch::manual_seed(0);
  torch::jit::Module m("CudaKnownChain");
  m.register_attribute("training", c10::BoolType::get(), true);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  m.register_parameter("w1", torch::randn({32, 64}, cuda).requires_grad_(), false);
  m.register_parameter("w2", torch::randn({64, 16}, cuda).requires_grad_(), false);
  m.register_parameter("w3", torch::randn({16, 48}, cuda).requires_grad_(), false);
  m.register_buffer("running_mean", torch::rand({64}, cuda));
  m.register_buffer("running_var", torch::rand({64}, cuda) + 0.5);
  if (batch_norm_and_dropout) {
    m.define(R"(
      def forward(self, x):
          a = torch.batch_norm(torch.mm(x, self.w1), None, None, self.running_mean, self.running_var,
                               self.training, 0.1, 1e-5, False)
          a = torch.dropout(torch.relu(a), 0.5, self.training)
          b = torch.sin(torch.mm(a, self.w2))
          return torch.tanh(torch.mm(b, self.w3))
    )");
  } else {
    m.define(R"(
      def forward(self, x):
          a = torch.relu(torch.mm(x, self.w1))
          b = torch.sin(torch.mm(a, self.w2))
          return torch.tanh(torch.mm(b, self.w3))
    )");
  }
  return m;
}

void checkProbe() {
  const c10::Device device(torch::kCUDA, 0);
  auto probe = jitckpt::probes::makeMemoryProbe(device);
  const int64_t base = probe->resetPeak();
  {
    auto a = torch::empty({1 << 20}, torch::TensorOptions().device(device));
    { auto b = torch::empty({1 << 18}, torch::TensorOptions().device(device)); }
    check(probe->currentBytes() - base == (1 << 22), "CUDA probe: live bytes of a 4 MiB tensor",
          bytes(probe->currentBytes() - base));
    check(probe->peakBytes() - base == (1 << 22) + (1 << 20),
          "CUDA probe: peak with a freed 1 MiB tensor", bytes(probe->peakBytes() - base));
  }
  check(probe->currentBytes() == base, "CUDA probe: back to the baseline after the frees");
  auto stopwatch = jitckpt::probes::makeStopwatch(device);
  auto m = torch::randn({2048, 2048}, torch::TensorOptions().device(device));
  stopwatch->start();
  auto product = torch::mm(m, m);
  const double seconds = stopwatch->stopSeconds();
  check(seconds > 0 && seconds < 10, "CUDA stopwatch: a 2048^3 matmul",
        std::to_string(seconds * 1e3) + " ms");
}

void checkProfile() {
  torch::jit::Module m = knownChain(false);
  jitckpt::Partition partition = jitckpt::partitionModule(m);
  check(partition.stages.size() == 3, "partition of the known chain into 3 stages",
        std::to_string(partition.stages.size()));
  if (partition.stages.size() != 3) return;
  jitckpt::ProfileOptions options;
  options.progress = [](int, int) {};
  const auto x = torch::randn({64, 32}, torch::TensorOptions().device(torch::kCUDA));
  const jitckpt::ChainProfile p = jitckpt::profileChain(m, partition, {x}, options);
  const auto& c = p.costs;
  check(p.device.rfind("cuda", 0) == 0, "profile ran on CUDA", p.device);
  check(c.wa == std::vector<int64_t>{8192, 16384, 4096, 12288, 0}, "wa exact on CUDA");
  check(c.wd == std::vector<int64_t>{0, 16384, 4096, 12288, 0}, "wd exact on CUDA");
  check(c.wabar[1] >= c.wa[1] && c.wabar[2] >= 2 * c.wa[2] && c.wabar[3] >= c.wa[3],
        "wabar >= wa (sin keeps its input)",
        bytes(c.wabar[1]) + " " + bytes(c.wabar[2]) + " " + bytes(c.wabar[3]));
  bool positive_times = true;
  for (int l = 1; l <= 3; ++l) positive_times = positive_times && c.uf[l] > 0 && c.ub[l] > 0;
  check(positive_times, "CUDA-event times positive");
  check(p.measured_unconstrained_peak <= p.unconstrained_peak + 4096 &&
            p.measured_unconstrained_peak >= p.unconstrained_peak / 2,
        "measured no-checkpointing peak near the simulated one",
        bytes(p.measured_unconstrained_peak) + " vs " + bytes(p.unconstrained_peak));
  const jitckpt::ChainProfile again = jitckpt::profileChain(m, partition, {x}, options);
  check(again.costs.wa == c.wa && again.costs.wabar == c.wabar && again.costs.wd == c.wd,
        "sizes repeat on a second profile");
  for (int l = 0; l < static_cast<int>(p.labels.size()); ++l) {
    std::printf("  %-8s uf %.3f ms ub %.3f ms wa %lld wabar %lld wd %lld of %lld ob %lld\n",
                p.labels[l].c_str(), c.uf[l], c.ub[l], (long long)c.wa[l], (long long)c.wabar[l],
                (long long)c.wd[l], (long long)c.of[l], (long long)c.ob[l]);
  }
}

void checkStateUnchanged() {
  torch::jit::Module m = knownChain(true);
  m.train();
  jitckpt::Partition partition = jitckpt::partitionModule(m);
  const auto x = torch::randn({64, 32}, torch::TensorOptions().device(torch::kCUDA));
  std::vector<torch::Tensor> buffers;
  for (const auto& b : m.named_buffers()) buffers.push_back(b.value.clone());
  auto generator = at::cuda::detail::getDefaultCUDAGenerator(0);
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  jitckpt::ProfileOptions options;
  options.progress = [](int, int) {};
  jitckpt::profileChain(m, partition, {x}, options);
  bool same = true;
  size_t i = 0;
  for (const auto& b : m.named_buffers()) same = same && torch::equal(b.value, buffers[i++]);
  check(same, "profile leaves BatchNorm buffers unchanged on CUDA");
  const auto after = torch::rand({256}, torch::TensorOptions().device(torch::kCUDA));
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
  const auto without = torch::rand({256}, torch::TensorOptions().device(torch::kCUDA));
  check(torch::equal(after, without), "profile leaves the CUDA random state unchanged");
}

// Six equal tanh(mm) stages: the backward of one stage is small next to the chain's activations,
// so a limit under the unconstrained peak makes the plan recompute (on knownChain the first
// stage's backward alone sets the peak, and its smallest limit is its unconstrained peak).
torch::jit::Module evenChain() {
  torch::manual_seed(0);
  torch::jit::Module m("CudaEvenChain");
  m.register_attribute("training", c10::BoolType::get(), true);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  std::string body = "def forward(self, x):\n";
  for (int i = 0; i < 6; ++i) {
    const std::string name = "w" + std::to_string(i);
    m.register_parameter(name, (torch::randn({64, 64}, cuda) / 8).requires_grad_(), false);
    body += "    x = torch.tanh(torch.mm(x, self." + name + "))\n";
  }
  m.define(body + "    return x\n");
  return m;
}

void checkTrainingStep() {
  // Bit-identity is promised against the unmodified model under the unoptimizing executor (the
  // optimizing one fuses the unmodified graph's pointwise ops on CUDA, which rounds differently).
  torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
  const c10::Device device(torch::kCUDA, 0);
  // Batch 512: activations well above the parameters' gradients, which the plan counts too.
  const auto x = torch::randn({512, 64}, torch::TensorOptions().device(device));
  jitckpt::CheckpointOptions options;
  options.progress = [](const std::string&) {};
  torch::jit::Module reference = evenChain();
  torch::jit::Module original = evenChain();
  torch::jit::Module rewritten;
  try {
    rewritten = jitckpt::checkpoint(original, {x}, jitckpt::MemoryLimit::fraction(0.8), options);
  } catch (const c10::Error& e) {
    check(false, "checkpoint() at 0.8 of the unconstrained peak", e.what_without_backtrace());
    return;
  }
  const auto plan = jitckpt::planOf(rewritten);
  auto probe = jitckpt::probes::makeMemoryProbe(device);
  // The loss in a statement of its own: a C++ temporary output would live through backward, where
  // Python's `model(x).sum().backward()` (and the plan) frees it once the loss exists.
  auto step = [&](torch::jit::Module& module) {
    auto loss = module.forward({x}).toTensor().sum();
    loss.backward();
  };
  step(rewritten);
  step(rewritten);  // .grad buffers exist from here on
  const int64_t base = probe->resetPeak();
  step(rewritten);
  const int64_t measured = probe->peakBytes() - base + x.numel() * x.element_size();
  int64_t parameters = 0;
  for (const auto& p : rewritten.parameters()) parameters += p.numel() * p.element_size();
  const jitckpt::Solution& solution = plan->solution();
  check(measured <= solution.memory_limit + parameters + solution.memory_limit / 100 + 8192,
        "training step within the limit + parameter gradients + 1% (CUDA)",
        "measured " + bytes(measured) + ", predicted " + bytes(solution.predicted_peak) +
            ", limit " + bytes(solution.memory_limit));
  // Three steps on each: gradients accumulate the same way.
  for (int s = 0; s < 3; ++s) step(reference);
  bool equal = true;
  double max_difference = 0;
  auto p_ref = reference.parameters().begin();
  for (const auto& p : rewritten.parameters()) {
    const auto difference = ((*p_ref).grad() - p.grad()).abs().max().item<double>();
    max_difference = std::max(max_difference, difference);
    equal = equal && torch::equal((*p_ref).grad(), p.grad());
    ++p_ref;
  }
  {
    auto plain = evenChain();
    step(plain);
    step(plain);
    const int64_t plain_base = probe->resetPeak();
    step(plain);
    std::printf("  plain step peak %lld B\n",
                static_cast<long long>(probe->peakBytes() - plain_base));
  }
  check(equal, "gradients of the rewritten model match the original bit for bit (CUDA)",
        std::string(equal ? "bit-identical" : "max difference ") +
            (equal ? "" : std::to_string(max_difference)));
}

}  // namespace
#endif  // JITCKPT_CUDA

// --require-cuda: a jitckpt built without CUDA is a failure (the script knows PyTorch has CUDA).
int main(int argc, char** argv) {
  const bool require_cuda = argc > 1 && std::string(argv[1]) == "--require-cuda";
#ifndef JITCKPT_CUDA
  if (require_cuda) {
    std::printf("FAILED: jitckpt was built without CUDA although its LibTorch should have it\n");
    return 1;
  }
  std::printf("SKIPPED: jitckpt was built without CUDA (its LibTorch has none)\n");
  return 0;
#else
  (void)require_cuda;
  if (!torch::cuda::is_available()) {
    std::printf("SKIPPED: no CUDA device visible\n");
    return 0;
  }
  const std::pair<const char*, void (*)()> checks[] = {{"probe", checkProbe},
                                                       {"profile", checkProfile},
                                                       {"state", checkStateUnchanged},
                                                       {"training step", checkTrainingStep}};
  for (const auto& [name, run] : checks) {
    try {
      run();
    } catch (const std::exception& e) {
      check(false, std::string(name) + " threw", e.what());
    }
  }
  std::printf("%s: %d check(s) failed\n", failures == 0 ? "OK" : "FAILED", failures);
  return failures == 0 ? 0 : 1;
#endif
}
