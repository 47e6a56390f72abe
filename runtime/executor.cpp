// ScheduleExecutor (see executor.h).
#include "runtime/executor.h"

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <string>

#include "runtime/chain_arguments.h"
#include "runtime/probes/memory_probe.h"
#include "solver/baselines.h"
#include "solver/memory_limit.h"

namespace jitckpt {
namespace {

Tensors detachAll(const Tensors& tensors) {
  Tensors out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.detach());
  return out;
}

}  // namespace

StageGrew::StageGrew(int stage, const std::string& what, int64_t bytes, int64_t planned)
    : std::runtime_error("stage " + std::to_string(stage) + "'s " + what + " take " +
                         solver::formatBytes(bytes) + " where the plan has " +
                         solver::formatBytes(planned)),
      stage(stage),
      bytes(bytes),
      planned(planned) {}

ScheduleExecutor::ScheduleExecutor(c10::intrusive_ptr<Plan> plan, ChainArguments arguments,
                                   RunAs how)
    : plan_(std::move(plan)),
      how_(how),
      chain_(plan_->chainToRun(how)),
      runner_(chain_->stages, std::move(arguments), StageRunner::BufferWrites::FirstRunUpdates),
      L_(chain_->stages->size()),
      a_(L_ + 2),
      abar_(L_ + 2),
      delta_(L_ + 2) {
  a_[0] = detachAll(runner_.arguments().inputs);
  lifted_grads_.resize(runner_.arguments().lifted_tensors.size());
  const auto& schedule = chain_->schedule;
  const Solution& solution = plan_->solution();
  // Elsewhere the sizes follow from the input key's shapes alone.
  checks_sizes_ = !plan_->stages().stagesSizedByData().empty() &&
                  solution.requested_limit.kind != solver::MemoryLimit::Kind::Unlimited &&
                  solution.costs.wa.size() > static_cast<size_t>(plan_->numStages());
  device_ = chainDevice(runner_.arguments()).value_or(c10::Device(c10::kCPU));
  last_read_.assign(L_, schedule.size());
  for (size_t i = 0; i < schedule.size(); ++i) {
    const int l = schedule[i].stage;
    if (schedule[i].kind != solver::OpKind::Backward && l >= 1 && l <= L_) last_read_[l - 1] = i;
  }
}

void ScheduleExecutor::releaseAfterLastRead(size_t index) {
  const auto& op = chain_->schedule[index];
  const int l = op.stage;
  if (op.kind == solver::OpKind::Backward || l < 2 || l > L_ || last_read_[l - 1] != index) return;
  if (abar_[l - 1]) abar_[l - 1]->releaseOutputs();
}

void ScheduleExecutor::checkOutputSizes(int l, const Tensors& outputs) const {
  if (!checks_sizes_ || l > L_) return;
  const int planned =
      solver::lastStageOf(chain_->first, static_cast<size_t>(l - 1), plan_->numStages());
  const int64_t expected = plan_->solution().costs.wa[static_cast<size_t>(planned)];
  const int64_t bytes = probes::storageBytes(outputs);
  if (bytes > expected) throw StageGrew(planned, "outputs", bytes, expected);
}

// Around one forward of a stage sized by data: the bytes it leaves held, and on the CPU its peak
// (there a caller's own peak survives the reset, counting_allocator.h; CUDA's peak statistic
// would lose it).
class StageMemoryWatch {
 public:
  explicit StageMemoryWatch(c10::Device device)
      : probe_(probes::makeMemoryProbe(device)),
        peaks_(device.is_cpu()),
        base_(peaks_ ? probe_->resetPeak() : probe_->currentBytes()) {}
  int64_t held() { return probe_->currentBytes() - base_; }
  int64_t peak() { return peaks_ ? probe_->peakBytes() - base_ : 0; }

 private:
  std::unique_ptr<probes::MemoryProbe> probe_;
  bool peaks_;
  int64_t base_;
};

bool ScheduleExecutor::watches(int l) const {
  if (!checks_sizes_ || how_ != RunAs::EveryStage) return false;
  const auto& steered = plan_->stages().stagesSteeredByData();
  if (std::binary_search(steered.begin(), steered.end(), l)) return true;
  const auto& sized = plan_->stages().stagesSizedByData();
  return in_forward_ && std::binary_search(sized.begin(), sized.end(), l);
}

RecordedStage ScheduleExecutor::recordedForward(int l) {
  if (!watches(l)) return runner_.recordedForward(l, stageInput(l));
  // (how_ is EveryStage: the call's stage l is planned stage l)
  const solver::Costs& costs = plan_->solution().costs;
  StageMemoryWatch watch(device_);
  RecordedStage recorded = runner_.recordedForward(l, stageInput(l));
  const auto planned = static_cast<size_t>(l);
  const int64_t kept = watch.held(), peak = watch.peak();
  if (kept > costs.wabar[planned])
    throw StageGrew(l, "tensors kept for the backward", kept, costs.wabar[planned]);
  if (peak > costs.wabar[planned] + costs.of[planned])
    throw StageGrew(l, "tensors while it runs", peak, costs.wabar[planned] + costs.of[planned]);
  return recorded;
}

Tensors ScheduleExecutor::stageForward(int l) {
  if (!watches(l) || !device_.is_cpu()) return runner_.forward(l, stageInput(l));
  const solver::Costs& costs = plan_->solution().costs;
  StageMemoryWatch watch(device_);
  Tensors outputs = runner_.forward(l, stageInput(l));
  // what it made of its outputs, and its overhead, as the profile measured them
  const int64_t allowed =
      costs.wa[static_cast<size_t>(l)] - costs.passedBytes(l) + costs.noGradForwardOverhead(l);
  const int64_t peak = watch.peak();
  if (peak > allowed) throw StageGrew(l, "tensors while it runs", peak, allowed);
  return outputs;
}

const Tensors& ScheduleExecutor::stageInput(int l) const {
  if (a_[l - 1]) return *a_[l - 1];
  TORCH_INTERNAL_ASSERT(
      abar_[l - 1] && abar_[l - 1]->outputs.size() == abar_[l - 1]->output_edges.size(),
      "jitckpt executor: stage ", l, " needs a^", l - 1,
      ", which is not held (the schedule and the executor disagree)");
  return abar_[l - 1]->outputs;
}

Tensors ScheduleExecutor::runInference() {
  Tensors current = *a_[0];
  a_[0].reset();
  for (int l = 1; l <= L_; ++l) current = runner_.inference(l, current);
  return current;
}

bool ScheduleExecutor::recordsOnce() const {
  return how_ != RunAs::EveryStage &&
         chain_->schedule == solver::noCheckpointScheduleOfLength(L_ + 1);
}

Tensors ScheduleExecutor::runRecordedOnce() {
  TORCH_INTERNAL_ASSERT(recordsOnce(), "jitckpt executor: the schedule ",
                        solver::toString(chain_->schedule), " does not record each stage once");
  a_[0].reset();
  Tensors current = runner_.arguments().inputs;
  for (int l = 1; l <= L_; ++l) {
    RECORD_USER_SCOPE("jitckpt::Fall");
    current = runner_.wholeGraphForward(l, current, /*side_leaves=*/nullptr);
    checkOutputSizes(l, current);
  }
  return current;
}

void ScheduleExecutor::execute(const solver::Op& op) {
  using solver::OpKind;
  const int l = op.stage;
  if (l == L_ + 1) {
    // The terminal stage is the hand-off to autograd: its forward is a no-op, its B receives
    // delta^L (set by runBackward) and consumes a^L.
    if (op.kind == OpKind::Backward) a_[L_].reset();
    return;
  }
  // Named as in the schedule's text in torch.profiler's traces: a user sees each stage run.
  switch (op.kind) {
    case OpKind::ForwardAll: {
      RECORD_USER_SCOPE("jitckpt::Fall");
      abar_[l] = recordedForward(l);
      a_[l].reset();  // abar^l holds a^l
      checkOutputSizes(l, abar_[l]->outputs);
      break;
    }
    case OpKind::ForwardCheck:
    case OpKind::ForwardNone: {
      RECORD_USER_SCOPE(op.kind == OpKind::ForwardNone ? "jitckpt::Fn" : "jitckpt::Fck");
      Tensors outputs = stageForward(l);
      checkOutputSizes(l, outputs);
      if (op.kind == OpKind::ForwardNone) a_[l - 1].reset();  // abar^{l-1}, if held, stays
      a_[l] = std::move(outputs);
      break;
    }
    case OpKind::Backward: {
      RECORD_USER_SCOPE(backwardScope(l, l));
      backwardRun(l, l);
      break;
    }
  }
}

std::string ScheduleExecutor::backwardScope(int l, int m) const {
  // Named in torch.profiler's traces by the planned stages it runs, first and last.
  const auto& first = chain_->first;
  const int top = solver::lastStageOf(first, static_cast<size_t>(l - 1), plan_->numStages());
  const int bottom = first[m - 1];
  if (top == bottom) return "jitckpt::B";
  return "jitckpt::B" + std::to_string(top) + ".." + std::to_string(bottom);
}

size_t ScheduleExecutor::backwardRunEnd(size_t first) const {
  const auto& schedule = chain_->schedule;
  const int l = schedule[first].stage;
  if (schedule[first].kind != solver::OpKind::Backward || l > L_ || !abar_[l]) return first + 1;
  std::unordered_set<size_t> positions = runner_.liftedPositions(*abar_[l]);
  size_t end = first + 1;
  for (; end < schedule.size(); ++end) {
    const int k = schedule[end].stage;
    if (schedule[end].kind != solver::OpKind::Backward || k != schedule[end - 1].stage - 1 ||
        k < 1 || !abar_[k] || delta_[k] ||
        !runner_.joinsBackwardRun(*abar_[k + 1], *abar_[k], positions, lifted_grads_))
      break;
  }
  return end;
}

void ScheduleExecutor::backwardRun(int l, int m) {
  TORCH_INTERNAL_ASSERT(abar_[l] && delta_[l], "jitckpt executor: B(", l, ") without abar^", l,
                        " and delta^", l, " (the schedule and the executor disagree)");
  std::vector<RecordedStage> run;
  for (int k = l; k >= m; --k) {
    TORCH_INTERNAL_ASSERT(abar_[k], "jitckpt executor: B(", k, ") without abar^", k);
    run.push_back(std::move(*abar_[k]));
    abar_[k].reset();
  }
  Tensors output_grads = std::move(*delta_[l]);
  delta_[l].reset();
  delta_[m - 1] = runner_.backwardRun(std::move(run), std::move(output_grads), lifted_grads_);
  for (int k = l; k >= m; --k) a_[k - 1].reset();  // consumed; abar^{m-1}, if held, stays
}

Tensors ScheduleExecutor::runForward() {
  const auto& schedule = chain_->schedule;
  in_forward_ = true;
  for (; next_op_ < schedule.size(); ++next_op_) {
    if (schedule[next_op_].kind == solver::OpKind::Backward) break;
    execute(schedule[next_op_]);
    releaseAfterLastRead(next_op_);
  }
  in_forward_ = false;
  TORCH_INTERNAL_ASSERT(next_op_ < schedule.size() && schedule[next_op_].stage == L_ + 1,
                        "jitckpt executor: the schedule's forward part does not end at B(", L_ + 1,
                        ")");
  // Autograd gets aliases, not the tensors that carry the recorded graph of the last stage.
  Tensors outputs = detachAll(stageInput(L_ + 1));
  num_outputs_ = outputs.size();
  // a^L is read no more (B(L+1) only drops it): the caller's aliases hold it as long as the
  // caller does, as the unmodified model's outputs are held.
  a_[L_].reset();
  if (abar_[L_]) abar_[L_]->releaseOutputs();
  return outputs;
}

// Autograd passes an undefined gradient for an output that the loss does not reach; it stays
// undefined, so that a parameter that only such outputs read gets no gradient (None), as in the
// unmodified model, not zeros.
void ScheduleExecutor::checkOutputGrads(const Tensors& grads) const {
  TORCH_INTERNAL_ASSERT(grads.size() == num_outputs_, "jitckpt executor: ", grads.size(),
                        " output gradients for ", num_outputs_, " outputs");
}

Tensors ScheduleExecutor::runBackwardWholeGraph(const Tensors& output_grads) {
  c10::AutoGradMode recording(true);
  const ChainArguments& arguments = runner_.arguments();
  // The chain inputs and side values enter as leaves, so that autograd stops at the chain's
  // boundary (the graph before it is the caller's, walked once, by autograd).
  Tensors inputs;
  for (const auto& t : arguments.inputs)
    inputs.push_back(t.detach().requires_grad_(t.requires_grad() && t.is_floating_point()));
  SideLeaves side_leaves;
  Tensors current = inputs;
  for (int l = 1; l <= L_; ++l) current = runner_.wholeGraphForward(l, current, &side_leaves);
  checkOutputGrads(output_grads);
  Tensors roots, root_grads;
  for (size_t i = 0; i < current.size(); ++i) {
    if (!current[i].requires_grad() || !output_grads[i].defined()) continue;
    roots.push_back(current[i]);
    root_grads.push_back(output_grads[i]);
  }
  current.clear();
  // What to differentiate, and where each gradient goes among the op's inputs then lifted tensors.
  Tensors wrt;
  std::vector<size_t> where;
  const size_t num_inputs = inputs.size();
  for (size_t i = 0; i < num_inputs; ++i) {
    if (!inputs[i].requires_grad()) continue;
    wrt.push_back(inputs[i]);
    where.push_back(i);
  }
  for (auto& [position, leaf] : side_leaves) {
    wrt.push_back(std::move(leaf));
    where.push_back(num_inputs + runner_.firstPosition(position));
  }
  Tensors result(num_inputs + arguments.lifted_tensors.size());
  if (roots.empty() || wrt.empty()) return result;
  Tensors computed = torch::autograd::grad(roots, wrt, root_grads, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  // Each tensor has one leaf (wholeGraphForward), so autograd has added its uses across the
  // stages; tensors lifted under several names (tied weights) too. Last first, as before.
  for (size_t j = computed.size(); j-- > 0;) {
    if (!computed[j].defined()) continue;
    at::Tensor& sum = result[where[j]];
    sum = sum.defined() ? sum + computed[j] : std::move(computed[j]);
  }
  return result;
}

Tensors ScheduleExecutor::runBackward(Tensors output_grads) {
  checkOutputGrads(output_grads);
  delta_[L_] = std::move(output_grads);
  const auto& schedule = chain_->schedule;
  while (next_op_ < schedule.size()) {
    const size_t end = backwardRunEnd(next_op_);
    if (end > next_op_ + 1) {
      RECORD_USER_SCOPE(backwardScope(schedule[next_op_].stage, schedule[end - 1].stage));
      backwardRun(schedule[next_op_].stage, schedule[end - 1].stage);
      next_op_ = end;  // (B ops release no forward input: releaseAfterLastRead has nothing to do)
      continue;
    }
    execute(schedule[next_op_]);
    releaseAfterLastRead(next_op_);
    ++next_op_;
  }
  TORCH_INTERNAL_ASSERT(delta_[0], "jitckpt executor: the schedule ended without delta^0");
  Tensors result = std::move(*delta_[0]);
  delta_[0].reset();
  for (auto& g : lifted_grads_) result.push_back(std::move(g));
  return result;
}

}  // namespace jitckpt
