// The stages of a chain as the runtime runs them. Takes the stage graphs and metadata that the
// partition pass found; holds them immutable, with the values lifted out of the model
// (parameters, buffers, flags) in the order the jitckpt::chain op receives them, and compiles each
// stage graph once, on first use.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace jitckpt {

// A value a stage reads that is not an activation: parameters, buffers, non-tensor values such as
// the `training` flag (an Optional[Tensor] attribute holding None travels as a scalar), and side
// tensors: model inputs or values computed before the chain that several stages read (an attention
// mask, position embeddings, a second input), held once for the whole call; when one requires
// grad, its gradient is the sum over the stages that read it. Lifted values are never counted as
// activation memory.
enum class LiftedKind { Parameter, Buffer, Scalar, Side };

// Whether `n` draws from a random generator: the ops TorchScript marks nondeterministic (dropout,
// rand, bernoulli, ...), the recurrent layers, whose kernels draw a dropout mask between layers
// when trained with dropout > 0 (TorchScript does not mark them), other namespaces' ops tagged
// nondeterministic_seeded (the Functions bindings/jitckpt/export/autograd_functions.py keeps
// whole), calls of Python (@torch.jit.ignore), which may draw, and autocast blocks
// (autocast_block.h) holding any of these. A stage with one replays its
// generator state when it is recomputed, and such a node is never moved or run twice.
bool drawsRandomNumbers(const torch::jit::Node* n);
// Whether `n` is a recurrent layer that may drop out between its layers (its dropout not a
// constant 0, its train flag not a constant false). On CUDA, cuDNN draws that mask from a random
// state of its own (PyTorch's RNN.cpp), which advances at every call and which no saved generator
// state restores: a second run of the stage draws another mask.
bool dropsOutBetweenLayers(const torch::jit::Node* n);
// Inputs that `n` writes in place: arguments annotated (a!) in its schema, and the running
// statistics of the norm ops, which write them without saying so in their schema.
std::vector<size_t> directlyWrittenInputs(const torch::jit::Node* n);
std::string toString(LiftedKind kind);

struct LiftedSpec {
  std::string name;  // attribute path such as "layer1.0.bn1.running_mean", or "training"
  LiftedKind kind = LiftedKind::Scalar;
  // Whether it may differ between calls whose tensors have the same shapes (an int argument of
  // forward, a number read from a tensor before the chain): where a stage reads it, the data may
  // set sizes (findStagesSizedByData). Side tensors are the data's in any case.
  bool beyond_shapes = false;
  // Whether the forward may read it after the chain too (true where that is not known: a plan
  // loaded from a file). A weight cast there again is not cast once for the chain
  // (castWhereverRead).
  bool read_after_chain = true;
};

struct StageSpec {
  // Inputs: the activation inputs (boundary tensors) first, then one input per entry of `lifted`.
  // Outputs: the activations of the next boundary.
  std::shared_ptr<torch::jit::Graph> graph;
  size_t num_activation_inputs = 0;
  std::vector<size_t> lifted;            // graph input num_activation_inputs + k is lifted[k]
  std::vector<size_t> mutated_lifted;    // lifted values it writes in place (BatchNorm statistics)
  bool writes_activation_input = false;  // writes an activation input in place
  std::string label;                     // short description for printing, e.g. "layer1.0"
};

class ChainStages {
 public:
  // Copies the graphs. Throws (TORCH_CHECK) when a stage's graph does not have the inputs its
  // metadata says, or refers to a lifted value that does not exist.
  ChainStages(const std::vector<StageSpec>& stages, std::vector<LiftedSpec> lifted);

  int size() const { return static_cast<int>(stages_.size()); }      // L
  const StageSpec& stage(int l) const { return stages_.at(l - 1); }  // l = 1..L
  const std::vector<StageSpec>& stages() const { return stages_; }
  bool hasRandomOps(int l) const { return random_.at(l - 1); }  // dropout and the like
  // The stages whose forward may run only once on `device` (solver::Costs::runs_once): on CUDA
  // with cuDNN enabled, those with a recurrent layer that drops out between its layers; on every
  // device, those steered by data (stagesSteeredByData), so that the one run, which records, comes
  // before any backward and a call that keeps more than planned can run again.
  std::vector<int> stagesThatRunOnce(c10::Device device) const;
  // The stages with an op that makes a tensor whose size comes from values, not shapes
  // (nonzero, masked_select, unique, indexing that may take a boolean mask, a tensor read as a
  // number): a call's data can give them larger tensors than the profile measured.
  const std::vector<int>& stagesSizedByData() const { return sized_by_data_; }
  // Those of them that branch or loop on the data's values (findStagesSizedByData).
  const std::vector<int>& stagesSteeredByData() const { return steered_by_data_; }
  // Whether stage l holds an op whose kernel depends on the autograd state (RNNs, attention):
  // its runs without a graph must still run as the recording run does to give the same bits.
  bool hasAutogradDependentKernels(int l) const { return autograd_kernels_.at(l - 1); }
  // Whether chain output i (an output of stage L) is also read by an op of the chain, in the stage
  // that makes it or in one that it passes through: its gradient then has a part that only the
  // chain's backward adds, which a hook on the returned tensor does not see.
  bool outputReadInside(size_t i) const { return outputs_read_inside_.at(i); }
  // Whether chain output i never requires grad (made by detach inside the chain, or from such
  // values alone): the chain op marks it non-differentiable, as autograd leaves it in the model.
  bool outputNeverRequiresGrad(size_t i) const { return outputs_never_require_grad_.at(i); }
  // Per stage l and activation input i (at [l - 1][i]): whether it never requires grad when the
  // chain inputs that do are those true in `chain_inputs_require_grad`, and the lifted tensors
  // those true in `lifted_tensors_require_grad` (by position; findNeverRequiresGrad: a mask made
  // in forward, from side tensors that need no grad, and carried across cuts). Recorded runs give
  // such an input no gradient edge, as the model gives it none, so that kernels that choose by
  // requires_grad (attention's) choose as in the model. Computed once per set of flags.
  using InputFlags = std::vector<std::vector<bool>>;
  std::shared_ptr<const InputFlags> inputsNeverRequireGrad(
      const std::vector<bool>& chain_inputs_require_grad,
      const std::vector<bool>& lifted_tensors_require_grad) const;
  // Whether stage l's outputs may depend on the value of lifted tensor k (entry j of its
  // `lifted`), not only on its identity: false where the stage only writes it in place or hands it
  // to BatchNorm as running statistics (which training reads not, and which nothing writes in
  // eval). A recomputation must read such a value as the stage's first run did.
  bool readsValue(int l, size_t j) const { return reads_value_.at(l - 1).at(j); }
  // Entries j of stage l's `lifted` that are parameters an op reads in the autocast dtype (a
  // Linear's or a convolution's weight; an RNN's, through the list it reads them from): under
  // autocast each stage casts its own copy of them.
  const std::vector<size_t>& castLifted(int l) const { return cast_lifted_.at(l - 1); }
  // Whether lifted value k is a parameter that several stages read, each only as an argument of
  // ops that autocast casts (ALBERT's shared layers), and that the forward does not read after
  // the chain: it may be cast once for the whole chain (castSharedWeights).
  bool castWhereverRead(size_t k) const { return cast_wherever_read_.at(k); }
  // True at the first call only: the warning about such weights is given once per chain.
  bool firstCastWarning() const { return !cast_warned_.exchange(true); }
  // Whether stage l's B copied a parameter's gradient to lay it out as the parameter (its
  // gradient came out transposed, say): the copy comes when the engine call that runs B(l) ends,
  // so that no stage below l may share that call (a group, a run of B), or the copy would come
  // on top of the gradients of the stages below, which the plan does not count. Learned as B
  // runs (the profile runs every stage's), kept for the chain's life.
  bool copiesParameterGradients(int l) const { return copies_gradients_.at(l - 1).load(); }
  void setCopiesParameterGradients(int l) const { copies_gradients_.at(l - 1).store(true); }
  const std::vector<LiftedSpec>& lifted() const { return lifted_; }
  // Where lifted value k arrives: its index among the op's lifted tensors (Parameter, Buffer) or
  // lifted scalars (Scalar).
  size_t position(size_t k) const { return position_.at(k); }
  size_t numLiftedTensors() const { return num_tensors_; }
  size_t numLiftedScalars() const { return lifted_.size() - num_tensors_; }

  torch::jit::Code& code(int l) const;  // stage l compiled, once per process

  // Refuses (TORCH_CHECK) lifted tensors, `lifted_tensors` in position order, where a stage
  // writes one that shares memory with another (a buffer registered as a view of another): the
  // runtime keeps each written tensor's values per tensor, so a stage reading the other would see
  // it as the call began. The same tensor lifted under several names is fine.
  void checkWrittenTensorsShareNoMemory(const std::vector<at::Tensor>& lifted_tensors) const;

 private:
  std::vector<StageSpec> stages_;
  std::vector<bool> random_;
  std::vector<bool> recurrent_dropout_;
  std::vector<bool> autograd_kernels_;
  std::vector<int> sized_by_data_, steered_by_data_;
  std::vector<bool> outputs_read_inside_;
  std::vector<bool> outputs_never_require_grad_;
  mutable std::mutex never_mutex_;
  mutable std::map<std::vector<bool>, std::shared_ptr<const InputFlags>> inputs_never_;
  std::vector<std::vector<bool>> reads_value_;
  std::vector<std::vector<size_t>> cast_lifted_;
  std::vector<bool> cast_wherever_read_;
  mutable std::atomic<bool> cast_warned_{false};
  mutable std::vector<std::atomic<bool>> copies_gradients_;
  std::vector<LiftedSpec> lifted_;
  std::vector<size_t> position_;
  size_t num_tensors_ = 0;
  mutable std::mutex codes_mutex_;
  mutable std::vector<std::unique_ptr<torch::jit::Code>> codes_;
};

}  // namespace jitckpt
