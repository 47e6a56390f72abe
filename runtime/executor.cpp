// Executor: a Plan's schedule on real tensors (see executor.h).
#include "runtime/executor.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <mutex>

#include "runtime/stage_backward.h"

namespace jitckpt {
namespace {

std::vector<at::Tensor> detachAll(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.detach());
  return out;
}

bool contains(const std::vector<size_t>& list, size_t value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

ChainExecutor::ChainExecutor(c10::intrusive_ptr<Plan> plan, std::vector<at::Tensor> inputs,
                             std::vector<at::Tensor> lifted_tensors,
                             std::vector<c10::IValue> lifted_scalars)
    : plan_(std::move(plan)),
      L_(plan_->numStages()),
      lifted_tensors_(std::move(lifted_tensors)),
      lifted_scalars_(std::move(lifted_scalars)),
      a_(L_ + 2),
      abar_(L_ + 2),
      delta_(L_ + 2),
      ran_(L_ + 2, false),
      random_(L_ + 2) {
  size_t tensors = 0, scalars = 0;
  for (LiftedKind k : plan_->lifted_kinds) (k == LiftedKind::Scalar ? scalars : tensors)++;
  TORCH_CHECK(
      lifted_tensors_.size() == tensors && lifted_scalars_.size() == scalars,
      "jitckpt::chain: the plan expects ", tensors, " lifted tensors and ", scalars,
      " lifted scalars but got ", lifted_tensors_.size(), " and ", lifted_scalars_.size(),
      "; the module and its plan do not match (re-run jitckpt.checkpoint on the original module)");
  TORCH_CHECK(inputs.size() == plan_->stages.front().num_activation_inputs, "jitckpt::chain: got ",
              inputs.size(), " chain inputs for a plan whose first stage takes ",
              plan_->stages.front().num_activation_inputs);
  auto note_device = [&](const at::Tensor& t) {
    if (t.defined() && !t.is_cpu() &&
        std::find(devices_.begin(), devices_.end(), t.device()) == devices_.end()) {
      devices_.push_back(t.device());
    }
  };
  for (const auto& t : inputs) {
    input_requires_grad_ = input_requires_grad_ || t.requires_grad();
    note_device(t);
  }
  for (const auto& t : lifted_tensors_) note_device(t);
  a_[0] = detachAll(inputs);
  lifted_grads_.resize(lifted_tensors_.size());
}

c10::IValue ChainExecutor::liftedValue(size_t lifted) const {
  const size_t position = plan_->lifted_position[lifted];
  if (plan_->lifted_kinds[lifted] == LiftedKind::Scalar) return lifted_scalars_[position];
  return lifted_tensors_[position];
}

const std::vector<at::Tensor>& ChainExecutor::stageInput(int l) const {
  if (a_[l - 1]) return *a_[l - 1];
  TORCH_CHECK(abar_[l - 1], "jitckpt executor: stage ", l, " needs a^", l - 1,
              ", which is not held (the schedule and the executor disagree; this is a bug)");
  return abar_[l - 1]->outputs;
}

std::vector<at::Generator> ChainExecutor::generators() const {
  std::vector<at::Generator> out{at::detail::getDefaultCPUGenerator()};
  for (const c10::Device& d : devices_) out.push_back(at::globalContext().defaultGenerator(d));
  return out;
}

ChainExecutor::RandomState ChainExecutor::saveRandomState() const {
  RandomState state;
  const auto gens = generators();
  for (size_t i = 0; i < gens.size(); ++i) {
    at::Generator gen = gens[i];
    std::lock_guard<std::mutex> lock(gen.mutex());
    (i == 0 ? state.cpu : state.devices.emplace_back()) = gen.get_state();
  }
  return state;
}

void ChainExecutor::setRandomState(const RandomState& state) const {
  const auto gens = generators();
  for (size_t i = 0; i < gens.size(); ++i) {
    at::Generator gen = gens[i];
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(i == 0 ? state.cpu : state.devices[i - 1]);
  }
}

std::vector<at::Tensor> ChainExecutor::runStage(int l, const std::vector<at::Tensor>& activations,
                                                bool record) {
  const PlanStage& stage = plan_->stages[l - 1];
  const bool recomputation = ran_[l];
  c10::AutoGradMode grad_mode(record);
  torch::jit::Stack stack;
  stack.reserve(activations.size() + stage.lifted.size());
  for (const auto& t : activations) {
    // A stage that writes its input in place gets a copy: a^{l-1} may be a stored checkpoint or
    // an output saved in the recorded graph of stage l-1. The copy is made under the stage's grad
    // mode, so that when recording, the gradient flows through it to the leaf.
    stack.emplace_back(stage.writes_activation_input ? t.clone() : t);
  }
  for (size_t k : stage.lifted) {
    c10::IValue value = liftedValue(k);
    // Buffers (BatchNorm statistics) are updated once per step: recomputations write to clones.
    if (recomputation && value.isTensor() && contains(stage.mutated_lifted, k)) {
      value = value.toTensor().detach().clone();
    }
    stack.push_back(std::move(value));
  }
  // Random ops see the same numbers on recomputation: replay the generator state of the first
  // run, then put back the state the rest of the step expects.
  std::optional<RandomState> resume;
  if (stage.has_random_ops) {
    if (!recomputation) {
      random_[l] = saveRandomState();
    } else {
      resume = saveRandomState();
      setRandomState(*random_[l]);
    }
  }
  torch::jit::InterpreterState(plan_->code(l - 1)).run(stack);
  if (resume) setRandomState(*resume);
  ran_[l] = true;
  std::vector<at::Tensor> outputs;
  outputs.reserve(stack.size());
  for (auto& v : stack) outputs.push_back(std::move(v).toTensor());
  return outputs;
}

std::vector<at::Tensor> ChainExecutor::runInference() {
  std::vector<at::Tensor> current = *a_[0];
  a_[0].reset();
  for (int l = 1; l <= L_; ++l) current = runStage(l, current, /*record=*/false);
  return current;
}

void ChainExecutor::execute(const solver::Op& op) {
  using solver::OpKind;
  const int l = op.stage;
  if (l == L_ + 1) {
    // The terminal stage is the hand-off to autograd: its forward is a no-op, its B receives
    // delta^L (set by runBackward) and consumes a^L.
    if (op.kind == OpKind::Backward) a_[L_].reset();
    return;
  }
  switch (op.kind) {
    case OpKind::ForwardAll: {
      Recorded rec;
      const bool needs_input_grad = l > 1 || input_requires_grad_;
      for (const auto& t : stageInput(l)) {
        rec.leaves.push_back(
            t.detach().requires_grad_(needs_input_grad && at::isFloatingType(t.scalar_type())));
      }
      rec.outputs = runStage(l, rec.leaves, /*record=*/true);
      a_[l].reset();  // abar^l holds a^l
      abar_[l] = std::move(rec);
      break;
    }
    case OpKind::ForwardCheck:
    case OpKind::ForwardNone: {
      auto outputs = runStage(l, detachAll(stageInput(l)), /*record=*/false);
      if (op.kind == OpKind::ForwardNone) a_[l - 1].reset();  // abar^{l-1}, if held, stays
      a_[l] = std::move(outputs);
      break;
    }
    case OpKind::Backward: {
      TORCH_CHECK(abar_[l] && delta_[l], "jitckpt executor: B(", l, ") without abar^", l,
                  " and delta^", l, " (the schedule and the executor disagree; this is a bug)");
      Recorded rec = std::move(*abar_[l]);
      abar_[l].reset();
      std::vector<at::Tensor> grads_out = std::move(*delta_[l]);
      delta_[l].reset();
      const PlanStage& stage = plan_->stages[l - 1];

      std::vector<at::Tensor> roots, root_grads;
      for (size_t i = 0; i < rec.outputs.size(); ++i) {
        if (rec.outputs[i].requires_grad() && grads_out[i].defined()) {
          roots.push_back(rec.outputs[i]);
          root_grads.push_back(grads_out[i]);
        }
      }
      // What the gradient is taken with respect to: the leaves that require grad, then the
      // lifted tensors of this stage that do. `targets` says where each result goes.
      std::vector<at::Tensor> wrt;
      std::vector<std::pair<bool, size_t>> targets;  // (is input, index)
      for (size_t i = 0; i < rec.leaves.size(); ++i) {
        if (rec.leaves[i].requires_grad()) {
          wrt.push_back(rec.leaves[i]);
          targets.emplace_back(true, i);
        }
      }
      const size_t num_input_leaves = wrt.size();
      for (size_t k : stage.lifted) {
        if (plan_->lifted_kinds[k] == LiftedKind::Scalar) continue;
        const size_t position = plan_->lifted_position[k];
        if (lifted_tensors_[position].requires_grad()) {
          wrt.push_back(lifted_tensors_[position]);
          targets.emplace_back(false, position);
        }
      }
      std::vector<at::Tensor> input_grads(rec.leaves.size());
      {
        // Parameter gradients usually go straight into .grad inside stageBackward; they come
        // back here only when the stage also reads a non-leaf lifted tensor.
        std::vector<at::Tensor> computed = stageBackward(roots, root_grads, wrt, num_input_leaves);
        for (size_t i = 0; i < computed.size(); ++i) {
          if (!computed[i].defined()) continue;
          const auto [is_input, index] = targets[i];
          if (is_input) {
            input_grads[index] = std::move(computed[i]);
          } else if (lifted_tensors_[index].is_leaf()) {
            // Parameters: accumulate into .grad now, as AccumulateGrad does (assign, then +=),
            // rather than holding every stage's gradients until the chain's backward returns.
            // A tensor read by several stages gets later stages first, as autograd would.
            accumulateIntoGrad(lifted_tensors_[index], std::move(computed[i]));
          } else {
            at::Tensor& sum = lifted_grads_[index];
            sum = sum.defined() ? sum + computed[i] : std::move(computed[i]);
          }
        }
      }
      rec = Recorded{};  // abar^l is consumed
      roots.clear();
      delta_[l - 1] = std::move(input_grads);
      a_[l - 1].reset();  // consumed; abar^{l-1}, if held, stays
      break;
    }
  }
}

void ChainExecutor::accumulateIntoGrad(const at::Tensor& variable, at::Tensor&& gradient) {
  at::NoGradGuard no_grad;
  at::Tensor& grad = variable.mutable_grad();
  if (!grad.defined()) {
    grad = gradient.detach();
  } else {
    grad += gradient;
  }
}

std::vector<at::Tensor> ChainExecutor::runForward() {
  const auto& schedule = plan_->schedule;
  for (; next_op_ < schedule.size(); ++next_op_) {
    if (schedule[next_op_].kind == solver::OpKind::Backward) break;
    execute(schedule[next_op_]);
  }
  TORCH_CHECK(next_op_ < schedule.size() && schedule[next_op_].stage == L_ + 1,
              "jitckpt executor: the schedule's forward part does not end at B(", L_ + 1, ")");
  // Autograd gets aliases, not the tensors that carry the recorded graph of the last stage.
  std::vector<at::Tensor> outputs = detachAll(stageInput(L_ + 1));
  for (const auto& t : outputs) output_meta_.emplace_back(t.sizes().vec(), t.options());
  return outputs;
}

std::vector<at::Tensor> ChainExecutor::runBackward(const std::vector<at::Tensor>& output_grads) {
  TORCH_CHECK(output_grads.size() == output_meta_.size(), "jitckpt executor: ", output_grads.size(),
              " output gradients for ", output_meta_.size(), " outputs");
  std::vector<at::Tensor> grads = output_grads;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) grads[i] = at::zeros(output_meta_[i].first, output_meta_[i].second);
  }
  delta_[L_] = std::move(grads);
  const auto& schedule = plan_->schedule;
  for (; next_op_ < schedule.size(); ++next_op_) execute(schedule[next_op_]);
  TORCH_CHECK(delta_[0], "jitckpt executor: the schedule ended without the input gradient");
  std::vector<at::Tensor> result = std::move(*delta_[0]);
  delta_[0].reset();
  for (auto& g : lifted_grads_) result.push_back(std::move(g));
  return result;
}

}  // namespace jitckpt
