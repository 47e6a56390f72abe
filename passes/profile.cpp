// Profile pass (see profile.h): runs each stage alone, as the executor does, and measures the
// costs of the paper's Table 1 with the device's memory probe and stopwatch.
#include "passes/profile.h"

#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "passes/solver/baselines.h"
#include "passes/solver/simulator.h"
#include "runtime/probes/memory_probe.h"
#include "runtime/probes/state_guard.h"
#include "runtime/stage_backward.h"

namespace jitckpt {
namespace {

using Tensors = std::vector<at::Tensor>;

// Bytes of the distinct storages behind `tensors` (views of one storage count once).
int64_t storageBytes(const Tensors& tensors) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second) {
      bytes += static_cast<int64_t>(t.storage().nbytes());
    }
  }
  return bytes;
}

// Restores every buffer of a module (recursively) on destruction: the prologue may update some.
class ModuleBufferGuard {
 public:
  explicit ModuleBufferGuard(const torch::jit::Module& module) {
    for (const auto& buffer : module.named_buffers(/*recurse=*/true)) {
      if (buffer.value.defined()) saved_.emplace_back(buffer.value, buffer.value.detach().clone());
    }
  }
  ~ModuleBufferGuard() {
    torch::NoGradGuard no_grad;
    for (auto& [live, copy] : saved_) live.detach().copy_(copy);
  }
  ModuleBufferGuard(const ModuleBufferGuard&) = delete;
  ModuleBufferGuard& operator=(const ModuleBufferGuard&) = delete;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
};

// Prints "profiling stage i/L" at most once a second.
std::function<void(int, int)> defaultProgress() {
  auto last =
      std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  auto printed = std::make_shared<bool>(false);
  return [last, printed](int stage, int total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - *last >= std::chrono::seconds(1) || (stage == total && *printed)) {
      std::cerr << "jitckpt: profiling stage " << stage << "/" << total << "\n";
      *last = now;
      *printed = true;
    }
  };
}

// Runs the stages of a plan on example arguments, the way runtime/executor.cpp does.
class StageRunner {
 public:
  StageRunner(const Plan& plan, const ChainArguments& arguments)
      : plan_(plan), arguments_(arguments), buffer_copies_(plan.stages.size()) {
    bool any = false;
    for (const auto& t : arguments.inputs) any = any || t.requires_grad();
    input_requires_grad_ = any;
    // Stages that update buffers write to copies made once, before any measurement.
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      for (size_t k : plan.stages[s].mutated_lifted) {
        if (plan.lifted_kinds[k] == LiftedKind::Scalar) continue;
        buffer_copies_[s][k] =
            arguments.lifted_tensors.at(plan.lifted_position[k]).detach().clone();
      }
    }
  }

  bool inputRequiresGrad() const { return input_requires_grad_; }

  // Detached inputs of stage l; leaves requiring grad where the executor's Fall makes them so.
  Tensors leaves(int l, const Tensors& activations) const {
    const bool needs_grad = l > 1 || input_requires_grad_;
    Tensors out;
    for (const auto& t : activations) {
      out.push_back(t.detach().requires_grad_(needs_grad && t.is_floating_point()));
    }
    return out;
  }

  Tensors run(int l, const Tensors& activations, bool record) const {
    const PlanStage& stage = plan_.stages.at(l - 1);
    std::vector<c10::IValue> stack;
    for (const auto& t : activations) {
      stack.emplace_back(stage.writes_activation_input ? t.clone() : t);
    }
    for (size_t k : stage.lifted) {
      const size_t position = plan_.lifted_position[k];
      if (plan_.lifted_kinds[k] == LiftedKind::Scalar) {
        stack.push_back(arguments_.lifted_scalars.at(position));
        continue;
      }
      auto copy = buffer_copies_[l - 1].find(k);
      const at::Tensor& t = copy != buffer_copies_[l - 1].end()
                                ? copy->second
                                : arguments_.lifted_tensors.at(position);
      // An Optional[Tensor] attribute holding None (conv bias=False) reaches the stage as None.
      stack.push_back(t.defined() ? c10::IValue(t) : c10::IValue());
    }
    try {
      torch::AutoGradMode grad_mode(record);
      torch::jit::InterpreterState(plan_.code(l - 1)).run(stack);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "profiling stage ", l, " (", stage.label,
                  ") failed: ", e.what_without_backtrace());
    }
    Tensors outputs;
    for (const auto& v : stack) {
      TORCH_CHECK(v.isTensor(), "stage ", l, " (", stage.label, ") returned a ", v.tagKind(),
                  " where the partition promised a tensor");
      outputs.push_back(v.toTensor());
    }
    return outputs;
  }

  // The lifted tensors of stage l that get gradients (parameters).
  Tensors parameters(int l) const {
    Tensors out;
    for (size_t k : plan_.stages.at(l - 1).lifted) {
      if (plan_.lifted_kinds[k] == LiftedKind::Scalar) continue;
      const at::Tensor& t = arguments_.lifted_tensors.at(plan_.lifted_position[k]);
      if (t.defined() && t.requires_grad()) out.push_back(t);
    }
    return out;
  }

 private:
  const Plan& plan_;
  const ChainArguments& arguments_;
  std::vector<std::map<size_t, at::Tensor>> buffer_copies_;
  bool input_requires_grad_ = false;
};

// One B(l): gradients of the recorded outputs w.r.t. the leaves that require grad and the stage's
// parameters, with delta = the given gradients of the outputs that require grad.
struct BackwardInputs {
  Tensors roots, deltas, wrt;
  size_t num_input_leaves = 0;  // wrt[0..n) are input leaves, the rest parameters
  bool empty() const { return roots.empty() || wrt.empty(); }
};

BackwardInputs backwardInputs(const Tensors& leaves, const Tensors& outputs,
                              const Tensors& parameters,
                              const std::optional<Tensors>& output_grads = std::nullopt) {
  BackwardInputs b;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].requires_grad()) continue;
    at::Tensor delta = output_grads ? (*output_grads)[i] : at::ones_like(outputs[i]);
    if (!delta.defined()) continue;
    b.roots.push_back(outputs[i]);
    b.deltas.push_back(delta);
  }
  for (const auto& leaf : leaves) {
    if (leaf.requires_grad()) b.wrt.push_back(leaf);
  }
  b.num_input_leaves = b.wrt.size();
  b.wrt.insert(b.wrt.end(), parameters.begin(), parameters.end());
  return b;
}

// B as the executor runs it: parameter gradients go into .grad (GradStandIns) as they are made.
Tensors runBackward(const BackwardInputs& b) {
  return stageBackward(b.roots, b.deltas, b.wrt, b.num_input_leaves);
}

// Profiling runs B as the executor does, which adds parameter gradients into .grad. These are
// zeroed stand-ins, allocated before any measurement: model memory held across the step, as in
// a training step whose gradients already exist. The user's .grad is given back afterwards.
class GradStandIns {
 public:
  explicit GradStandIns(const Tensors& lifted) {
    for (const auto& t : lifted) {
      if (!t.defined() || !t.requires_grad() || !t.is_leaf()) continue;
      saved_.emplace_back(t, t.grad());
      t.mutable_grad() = at::zeros_like(t);
    }
  }
  ~GradStandIns() {
    // In reverse, so that a tensor lifted twice ends with its own gradient, not a stand-in.
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it)
      it->first.mutable_grad() = it->second;
  }
  GradStandIns(const GradStandIns&) = delete;
  GradStandIns& operator=(const GradStandIns&) = delete;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
};

// Gradients of a stage's inputs in input order (undefined where none), as delta^{l-1}.
Tensors inputGradients(const Tensors& leaves, const BackwardInputs& b, const Tensors& grads) {
  Tensors out(leaves.size());
  size_t next = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].requires_grad()) out[i] = grads[next++];
  }
  return out;
}

c10::Device chainDevice(const ChainArguments& arguments) {
  for (const auto& t : arguments.inputs) return t.device();
  for (const auto& t : arguments.lifted_tensors) return t.device();
  return c10::Device(c10::kCPU);
}

// The no-checkpointing schedule run for real (see ChainProfile::measured_unconstrained_peak).
int64_t measureUnconstrainedPeak(const StageRunner& runner, int L, const Tensors& chain_inputs,
                                 const Tensors& chain_outputs, probes::MemoryProbe& probe) {
  Tensors delta_L;
  for (const auto& t : chain_outputs) {
    delta_L.push_back(t.is_floating_point() ? at::ones_like(t) : at::Tensor());
  }
  const int64_t held_from_start = storageBytes(chain_inputs) + storageBytes(delta_L);
  std::vector<Tensors> leaves(L + 1), outputs(L + 1);
  const int64_t base = probe.resetPeak();
  Tensors current = chain_inputs;
  for (int l = 1; l <= L; ++l) {
    leaves[l] = runner.leaves(l, current);
    outputs[l] = runner.run(l, leaves[l], /*record=*/true);
    current = outputs[l];
  }
  current.clear();
  std::optional<Tensors> delta = std::move(delta_L);
  for (int l = L; l >= 1; --l) {
    BackwardInputs b = backwardInputs(leaves[l], outputs[l], runner.parameters(l), delta);
    Tensors grads = runBackward(b);
    Tensors next = inputGradients(leaves[l], b, grads);
    grads.clear();
    b = BackwardInputs{};
    leaves[l].clear();
    outputs[l].clear();
    delta = std::move(next);
  }
  delta.reset();
  return probe.peakBytes() - base + held_from_start;
}

}  // namespace

ChainArguments prologueArguments(const torch::jit::Module& module, const Partition& partition,
                                 const std::vector<c10::IValue>& example_inputs) {
  using torch::jit::Node;
  using torch::jit::Value;
  TORCH_CHECK(partition.graph && partition.first_node,
              "prologueArguments: the partition has no chain region");
  const size_t expected = partition.graph->inputs().size() - 1;
  TORCH_CHECK(example_inputs.size() == expected, "example inputs: forward takes ", expected,
              " input(s) besides self, but ", example_inputs.size(), " were given");

  // A copy of the method graph up to the chain region, returning what the chain op receives.
  auto prologue = std::make_shared<torch::jit::Graph>();
  std::unordered_map<Value*, Value*> env;
  for (Value* input : partition.graph->inputs())
    env[input] = prologue->addInput()->copyMetadata(input);
  for (Node* n : partition.graph->nodes()) {
    if (n == partition.first_node) break;
    Node* copy =
        prologue->insertNode(prologue->createClone(n, [&](Value* v) { return env.at(v); }));
    for (size_t o = 0; o < n->outputs().size(); ++o) env[n->output(o)] = copy->output(o);
  }
  auto mapped = [&](Value* v) {
    auto it = env.find(v);
    TORCH_CHECK(it != env.end(), "prologueArguments: value %", v->debugName(),
                " that the chain reads is not defined before the chain region");
    return it->second;
  };
  for (Value* v : partition.chain_inputs) prologue->registerOutput(mapped(v));
  for (const LiftedInput& l : partition.lifted) prologue->registerOutput(mapped(l.value));
  torch::jit::EliminateDeadCode(prologue);

  std::vector<c10::IValue> stack{module._ivalue()};
  stack.insert(stack.end(), example_inputs.begin(), example_inputs.end());
  {
    ModuleBufferGuard buffers(module);
    torch::AutoGradMode grad_mode(true);
    torch::jit::Code code(prologue, "jitckpt_prologue");
    try {
      torch::jit::InterpreterState(code).run(stack);
    } catch (const c10::Error& e) {
      TORCH_CHECK(
          false, "the example inputs do not fit the model's forward: ", e.what_without_backtrace());
    }
  }
  TORCH_CHECK(stack.size() == partition.chain_inputs.size() + partition.lifted.size(),
              "prologueArguments: the prologue returned ", stack.size(), " values");
  ChainArguments arguments;
  size_t i = 0;
  for (; i < partition.chain_inputs.size(); ++i) {
    TORCH_CHECK(stack[i].isTensor(), "chain input ", i, " is a ", stack[i].tagKind(),
                " for these example inputs, not a tensor");
    const at::Tensor t = stack[i].toTensor();
    arguments.inputs.push_back(t.detach().requires_grad_(t.requires_grad()));
  }
  for (const LiftedInput& l : partition.lifted) {
    const c10::IValue& v = stack[i++];
    if (l.kind == LiftedKind::Scalar) {
      arguments.lifted_scalars.push_back(v);
    } else {
      // None: an Optional[Tensor] attribute without a value, kept as an undefined tensor.
      TORCH_CHECK(v.isTensor() || v.isNone(), "attribute '", l.name, "' is a ", v.tagKind(),
                  " at run time, where the partition expected a tensor");
      arguments.lifted_tensors.push_back(v.isNone() ? at::Tensor() : v.toTensor());
    }
  }
  return arguments;
}

ChainProfile profileStages(const Plan& plan, const ChainArguments& arguments,
                           const ProfileOptions& options) {
  const int L = plan.numStages();
  TORCH_CHECK(L > 0, "profileStages: the plan has no stages");
  TORCH_CHECK(options.repeats >= 1 && options.warmup >= 0,
              "profileStages: repeats must be >= 1 and ", "warmup >= 0, got ", options.repeats,
              " and ", options.warmup);
  const c10::Device device = chainDevice(arguments);
  auto probe = probes::makeMemoryProbe(device);  // first: it must see the frees of what follows
  auto stopwatch = probes::makeStopwatch(device);
  probes::RngStateGuard rng(device);
  const GradStandIns grad_stand_ins(arguments.lifted_tensors);
  const StageRunner runner(plan, arguments);
  const auto progress = options.progress ? options.progress : defaultProgress();

  ChainProfile profile;
  profile.device = device.str();
  solver::Chain& c = profile.costs;
  c.uf = {0};
  c.ub = {0};
  c.wa = {storageBytes(arguments.inputs)};
  c.wabar = {0};
  c.wd = {0};
  c.of = {0};
  c.ob = {0};
  profile.labels = {"input"};

  Tensors current;
  for (const auto& t : arguments.inputs) current.push_back(t.detach());
  for (int l = 1; l <= L; ++l) {
    StageProfile s;
    s.label = plan.stages[l - 1].label;
    const Tensors parameters = runner.parameters(l);
    for (int w = 0; w < options.warmup; ++w) {
      runner.run(l, current, /*record=*/false);
      const Tensors leaves = runner.leaves(l, current);
      runBackward(backwardInputs(leaves, runner.run(l, leaves, /*record=*/true), parameters));
    }

    // F∅/Fck: keeps a^l.
    int64_t base = probe->resetPeak();
    Tensors outputs = runner.run(l, current, /*record=*/false);
    s.output_bytes = storageBytes(outputs);
    s.forward_overhead_no_grad = std::max<int64_t>(0, probe->peakBytes() - base - s.output_bytes);

    {  // Fall: keeps abar^l; then B(l).
      const Tensors leaves = runner.leaves(l, current);
      base = probe->resetPeak();
      Tensors recorded = runner.run(l, leaves, /*record=*/true);
      s.recorded_bytes = probe->currentBytes() - base;
      s.forward_overhead_grad = std::max<int64_t>(0, probe->peakBytes() - base - s.recorded_bytes);
      BackwardInputs b = backwardInputs(leaves, recorded, parameters);
      recorded.clear();  // the roots in `b` keep the graph alive
      base = probe->resetPeak();
      const Tensors grads = runBackward(b);
      const int64_t peak = probe->peakBytes() - base;
      const Tensors input_grads(grads.begin(), grads.begin() + b.num_input_leaves);
      s.input_grad_bytes = storageBytes(input_grads);
      s.parameter_grad_bytes = storageBytes(parameters);  // a gradient has its tensor's size
      s.backward_overhead = std::max<int64_t>(0, peak - s.input_grad_bytes);
    }

    std::vector<double> forward_ms, backward_ms;
    for (int r = 0; r < options.repeats; ++r) {
      const Tensors leaves = runner.leaves(l, current);
      stopwatch->start();
      const Tensors recorded = runner.run(l, leaves, /*record=*/true);
      forward_ms.push_back(stopwatch->stopSeconds() * 1e3);
      const BackwardInputs b = backwardInputs(leaves, recorded, parameters);
      stopwatch->start();
      runBackward(b);
      backward_ms.push_back(b.empty() ? 0.0 : stopwatch->stopSeconds() * 1e3);
    }
    s.forward_ms = probes::median(forward_ms);
    s.backward_ms = probes::median(backward_ms);

    c.uf.push_back(s.forward_ms);
    c.ub.push_back(s.backward_ms);
    c.wa.push_back(s.output_bytes);
    c.wabar.push_back(std::max(s.recorded_bytes, s.output_bytes));
    c.wd[l - 1] = s.input_grad_bytes;
    c.wd.push_back(0);  // delta^l: set by stage l+1 (or below for l = L)
    c.of.push_back(std::max(s.forward_overhead_no_grad, s.forward_overhead_grad));
    c.ob.push_back(s.backward_overhead);
    profile.labels.push_back(s.label);
    profile.stages.push_back(std::move(s));
    current = std::move(outputs);
    progress(l, L);
  }
  // delta^L: the executor receives one gradient per chain output (zeros where autograd has none).
  int64_t output_grad_bytes = 0;
  for (const auto& t : current) {
    if (t.is_floating_point())
      output_grad_bytes += static_cast<int64_t>(t.numel() * t.element_size());
  }
  c.wd[L] = output_grad_bytes;
  // The terminal stage L+1: the hand-off to autograd, free of cost.
  c.uf.push_back(0);
  c.ub.push_back(0);
  c.wa.push_back(0);
  c.wabar.push_back(0);
  c.wd.push_back(0);
  c.of.push_back(0);
  c.ob.push_back(0);
  profile.labels.push_back("loss");
  solver::validate(c);
  profile.unconstrained_peak = solver::simulate(c, solver::noCheckpointSchedule(c)).peak;
  if (options.measure_unconstrained_peak) {
    Tensors inputs;
    for (const auto& t : arguments.inputs) inputs.push_back(t.detach());
    profile.measured_unconstrained_peak =
        measureUnconstrainedPeak(runner, L, inputs, current, *probe);
  }
  return profile;
}

ChainProfile profileChain(const torch::jit::Module& module, const Partition& partition,
                          const std::vector<c10::IValue>& example_inputs,
                          const ProfileOptions& options) {
  const ChainArguments arguments = prologueArguments(module, partition, example_inputs);
  const auto plan = Plan::fromPartition(partition);
  return profileStages(*plan, arguments, options);
}

}  // namespace jitckpt
