// Executor: runs a Plan's schedule on real tensors for one training step. Forward runs the ops up
// to the first B (the terminal stage's: the hand-off to autograd) and returns the chain outputs;
// backward runs the rest with delta^L from autograd and returns the input and lifted gradients.
// Memory follows the simulator's state: a^l stored alone, abar^l = the recorded autograd graph
// of stage l (detached leaf inputs + outputs), delta^l; each is dropped as soon as the schedule
// is done with it.
//
// Exactness (bit-identical to running the stage graphs once, eagerly):
//  - buffers a stage updates in place (BatchNorm running statistics, num_batches_tracked) are
//    updated by the stage's first run of the step only; recomputations write to clones;
//  - a stage with random ops (dropout) replays, on recomputation, the CPU (and CUDA) generator
//    state its first run saw, and leaves the generators as it found them;
//  - a stage that writes its activation input in place runs on a copy, so a stored checkpoint
//    (or the recorded graph of the stage before) is never corrupted.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <vector>

#include "runtime/plan.h"

namespace jitckpt {

class ChainExecutor : public torch::CustomClassHolder {
 public:
  ChainExecutor(c10::intrusive_ptr<Plan> plan, std::vector<at::Tensor> inputs,
                std::vector<at::Tensor> lifted_tensors, std::vector<c10::IValue> lifted_scalars);

  // Runs the stages straight through without saving anything (inference, or nothing needs grad).
  std::vector<at::Tensor> runInference();
  // The schedule up to the first B; returns detached aliases of the chain outputs.
  std::vector<at::Tensor> runForward();
  // The rest of the schedule. Returns one gradient per chain input, then one per lifted tensor
  // (undefined where none); a lifted tensor read by several stages gets the sum.
  // Gradients of leaf lifted tensors (parameters) go straight into their .grad during the
  // backward, so they come back undefined: torch.autograd.grad with respect to parameters read by
  // the chain is not supported (use .grad).
  std::vector<at::Tensor> runBackward(const std::vector<at::Tensor>& output_grads);

 private:
  static void accumulateIntoGrad(const at::Tensor& variable, at::Tensor&& gradient);
  struct Recorded {                   // abar^l
    std::vector<at::Tensor> leaves;   // detached inputs with requires_grad
    std::vector<at::Tensor> outputs;  // stage outputs with their autograd graph
  };
  // Generator states before a stage's first run: the CPU one and one per accelerator in use.
  struct RandomState {
    at::Tensor cpu;
    std::vector<at::Tensor> devices;  // parallel to ChainExecutor::devices_
  };
  void execute(const solver::Op& op);
  const std::vector<at::Tensor>& stageInput(int l) const;  // a^{l-1}, alone or inside abar^{l-1}
  std::vector<at::Tensor> runStage(int l, const std::vector<at::Tensor>& activations, bool record);
  c10::IValue liftedValue(size_t lifted) const;
  std::vector<at::Generator> generators() const;  // CPU first, then devices_
  RandomState saveRandomState() const;
  void setRandomState(const RandomState& state) const;

  c10::intrusive_ptr<Plan> plan_;
  int L_;
  std::vector<at::Tensor> lifted_tensors_;
  std::vector<c10::IValue> lifted_scalars_;
  std::vector<c10::Device> devices_;                       // non-CPU devices of the tensors
  std::vector<std::optional<std::vector<at::Tensor>>> a_;  // a^l held alone
  std::vector<std::optional<Recorded>> abar_;
  std::vector<std::optional<std::vector<at::Tensor>>> delta_;
  std::vector<bool> ran_;                           // stage already executed this step
  std::vector<std::optional<RandomState>> random_;  // per stage with random ops
  std::vector<at::Tensor> lifted_grads_;
  size_t next_op_ = 0;
  bool input_requires_grad_ = false;
  // Shape and options of the chain outputs, for zero gradients where autograd gives none.
  std::vector<std::pair<std::vector<int64_t>, at::TensorOptions>> output_meta_;
};

}  // namespace jitckpt
