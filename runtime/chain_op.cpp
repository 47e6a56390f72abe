// The kernels of jitckpt::chain (see chain_op.h).
#include "runtime/chain_op.h"

#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "runtime/compat.h"
#include "runtime/executor.h"
#include "runtime/forward_start.h"
#include "runtime/replan.h"
#include "runtime/stage_autocast.h"
#include "solver/memory_limit.h"

namespace jitckpt {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

ChainArguments argumentsOf(at::TensorList inputs, at::TensorList lifted_tensors,
                           const c10::List<c10::IValue>& lifted_scalars) {
  ChainArguments arguments{inputs.vec(), lifted_tensors.vec(), {}};
  for (c10::IValue v : lifted_scalars) arguments.lifted_scalars.push_back(std::move(v));
  return arguments;
}

// The chain's parameter gradients reach .grad through autograd, as the model's do, so they are
// all held until the chain's backward ends: while .grad is None they take the place .grad would;
// beside existing gradients they are extra.
void warnIfGradientsAreHeld(const std::vector<at::Tensor>& lifted) {
  int64_t bytes = 0;
  for (const auto& t : lifted) {
    if (t.defined() && t.requires_grad() && t.is_leaf() && t.grad().defined())
      bytes += static_cast<int64_t>(t.numel() * t.element_size());
  }
  if (bytes == 0) return;
  TORCH_WARN_ONCE(
      "jitckpt: the parameters of the checkpointed chain already hold gradients in "
      ".grad, so its backward holds up to ",
      solver::formatBytes(bytes),
      " of new gradients until it hands them to autograd; zero gradients with "
      "zero_grad(set_to_none=True) (the default on PyTorch 2.x) to avoid that");
}

// The gradients of the chain's outputs, between the nodes that receive them from autograd and the
// chain's backward, which takes them out.
struct OutputGradients : public torch::CustomClassHolder {
  std::vector<size_t> positions;   // the outputs that require grad, one hand-off node each
  std::vector<WeakNodePtr> nodes;  // parallel to positions
  variable_list grads;             // as received, parallel to positions (undefined where none came)
  bool received = false;
};

// The grad_fn of an output the caller sees. The engine holds the gradients it passes to a node
// until that node returns (and PyTorch 1.13's custom Functions copy them), so the chain's own
// backward would hold delta^L to its end, where the unmodified model frees it after the last
// stage's backward. This node moves its gradient into OutputGradients and passes on none (the
// chain does not materialize missing gradients), so that the executor holds the only reference.
// One node per output, so that the hooks on each output can be told apart.
struct OutputGradientHandOff : public torch::autograd::Node {
  OutputGradientHandOff(c10::intrusive_ptr<OutputGradients> slot, size_t k)
      : slot_(std::move(slot)), k_(k) {}
  variable_list apply(variable_list&& grads) override {
    slot_->grads.at(k_) = std::move(grads.at(0));
    slot_->received = true;
    return variable_list(num_outputs());
  }
  std::string name() const override { return "jitckpt::OutputGradientHandOff"; }
  c10::intrusive_ptr<OutputGradients> slot_;
  size_t k_;
};

// Aliases of the chain's outputs whose gradients reach the chain through OutputGradientHandOff.
variable_list handOffOutputs(const variable_list& outputs,
                             const c10::intrusive_ptr<OutputGradients>& slot) {
  variable_list aliases;
  for (size_t i = 0; i < outputs.size(); ++i) {
    at::Tensor alias = outputs[i].detach();
    if (outputs[i].defined() && outputs[i].requires_grad()) {
      auto node = makeNode<OutputGradientHandOff>(slot, slot->positions.size());
      node->add_next_edge(torch::autograd::impl::gradient_edge(outputs[i]));
      const uint32_t input_nr = node->add_input_metadata(alias);
      torch::autograd::impl::set_gradient_edge(alias, {node, input_nr});
      slot->positions.push_back(i);
      slot->nodes.emplace_back(NodePtr(node));
    }
    aliases.push_back(std::move(alias));
  }
  slot->grads.resize(slot->positions.size());
  return aliases;
}

// A hook or retain_grad() on a returned tensor that the chain's later layers also read sees only
// the gradient of its uses outside the chain: the rest is added inside the chain's backward.
void warnIfHookedOutputsMissGradients(const OutputGradients& slot, const ChainStages& stages) {
  for (size_t k = 0; k < slot.positions.size(); ++k) {
    const auto node = slot.nodes[k].lock();
    if (!node || !hasGradientHooks(*node) || !stages.outputReadInside(slot.positions[k])) continue;
    TORCH_WARN(
        "jitckpt: a hook or retain_grad() is on a tensor that the checkpointed forward returns "
        "and its later layers also read: it saw only the gradient of that tensor's uses outside "
        "the chain, not the part those layers add inside the chain's backward (the unmodified "
        "model's hook sees the sum), so its .grad is partial and a hook that changes the gradient "
        "changes only that part; to hook the whole gradient, checkpoint the layers up to that "
        "tensor and run the layers that read it outside jitckpt");
    return;
  }
}

// What the chain's backward differentiates with: the gradients OutputGradientHandOff received
// (moved out, so that B(L) frees them), else those autograd passed; undefined where none.
variable_list takeOutputGradients(OutputGradients& slot, variable_list grad_outputs) {
  if (!slot.received) return grad_outputs;
  variable_list grads(grad_outputs.size());
  for (size_t k = 0; k < slot.positions.size(); ++k) {
    grads[slot.positions[k]] = std::move(slot.grads[k]);
    slot.grads[k] = at::Tensor();
  }
  slot.received = false;
  return grads;
}

// JITCKPT_GROUP_STAGES=0 runs every stage apart, for comparisons (read at each call).
bool groupsStages() {
  const char* value = std::getenv("JITCKPT_GROUP_STAGES");
  return !value || std::string(value) != "0";
}

// Under autocast each stage keeps its casts of the weights only while it runs, as the plan
// counts them, in a group too. Where the data may set the sizes of the chain's tensors and the
// plan has a limit, every stage runs apart, so that the executor sees each stage's outputs grow.
RunAs trainingRun(const Plan& plan) {
  if (!groupsStages()) return RunAs::EveryStage;
  if (!plan.stages().stagesSizedByData().empty() &&
      plan.solution().requested_limit.kind != solver::MemoryLimit::Kind::Unlimited)
    return RunAs::EveryStage;
  const AutocastState autocast = AutocastState::current();
  return autocast.cpu || autocast.cuda ? RunAs::GroupedUnderAutocast : RunAs::Grouped;
}

// The call's executor, made as a custom Function's forward runs, without grad modes (a plan for
// new input shapes is profiled and solved here).
// `grew`: the call ran before and its data made larger tensors than the plan it ran had: a plan
// for the larger sizes replaces that one.
// `start`: the note of the forward's start (forward_start.h), for what a plan made here counts.
c10::intrusive_ptr<ScheduleExecutor> executorFor(at::TensorList inputs,
                                                 at::TensorList lifted_tensors,
                                                 const c10::List<c10::IValue>& lifted_scalars,
                                                 const c10::intrusive_ptr<Plan>& plan,
                                                 const ForwardStart* start,
                                                 const StageGrew* grew = nullptr,
                                                 const c10::intrusive_ptr<Plan>& ran = {}) {
  c10::AutoGradMode no_grad(false);
  c10::AutoFwGradMode no_forward_grad(false);
  ChainArguments arguments = argumentsOf(inputs, lifted_tensors, lifted_scalars);
  arguments.held_before_chain_bytes = heldBeforeChainBytes(start, plan->stages(), arguments);
  // Other input shapes than the planned ones get their own plan (made once).
  auto active =
      grew ? planForLargerSizes(plan, ran, arguments, *grew) : planForArguments(plan, arguments);
  const RunAs how = trainingRun(*active);
  return c10::make_intrusive<ScheduleExecutor>(active, std::move(arguments), how);
}

struct ChainFunction : public torch::autograd::Function<ChainFunction> {
  // `inputs` and `lifted_tensors`, which the executor runs on, are arguments for autograd's edges.
  static variable_list forward(AutogradContext* ctx, at::TensorList /*inputs*/,
                               at::TensorList /*lifted_tensors*/,
                               c10::intrusive_ptr<ScheduleExecutor> executor,
                               c10::intrusive_ptr<OutputGradients> output_gradients) {
    ctx->set_materialize_grads(false);  // gradients arrive through OutputGradients
    ctx->saved_data["output_gradients"] = c10::IValue::make_capsule(std::move(output_gradients));
    variable_list outputs = executor->runForward();
    const ChainStages& stages = executor->plan().stages();
    ctx->saved_data["executor"] = c10::IValue::make_capsule(executor);
    variable_list detached;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].defined() && stages.outputNeverRequiresGrad(i)) detached.push_back(outputs[i]);
    }
    if (!detached.empty()) ctx->mark_non_differentiable(detached);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto found = ctx->saved_data.find("executor");
    TORCH_CHECK(found != ctx->saved_data.end(),
                "jitckpt::chain: backward ran twice through a checkpointed chain whose saved "
                "state the first backward freed; pass retain_graph=True to the first backward");
    auto executor = c10::static_intrusive_pointer_cast<ScheduleExecutor>(found->second.toCapsule());
    // Autograd runs backward with grad mode on exactly when create_graph=True.
    TORCH_CHECK(!c10::GradMode::is_enabled(),
                "jitckpt::chain: create_graph=True (double backward, as for gradient penalties) "
                "is not supported through a checkpointed chain: its gradients would not carry "
                "the graph of the unmodified model. Nothing of the chain was written to .grad; "
                "take that step on the module given to jitckpt.checkpoint (it shares its "
                "parameters with the rewritten one)");
    RECORD_USER_SCOPE("jitckpt::chain_backward");
    warnIfGradientsAreHeld(executor->arguments().lifted_tensors);
    auto& slot = *c10::static_intrusive_pointer_cast<OutputGradients>(
        ctx->saved_data.at("output_gradients").toCapsule());
    warnIfHookedOutputsMissGradients(slot, executor->plan().stages());
    grad_outputs = takeOutputGradients(slot, std::move(grad_outputs));
    variable_list grads;
    if (torch::autograd::get_current_graph_task_keep_graph()) {
      TORCH_WARN_ONCE(
          "jitckpt: a backward with retain_graph=True runs the checkpointed chain's forward "
          "again and differentiates it whole, holding all its activations as the unmodified "
          "model does: that backward saves no memory");
      grads = executor->runBackwardWholeGraph(grad_outputs);
    } else {
      ctx->saved_data.erase(found);
      grads = executor->runBackward(std::move(grad_outputs));
    }
    grads.push_back(at::Tensor());  // executor
    grads.push_back(at::Tensor());  // output_gradients
    return grads;
  }
};

// The buffers the chain's stages update in place (BatchNorm statistics), copied before a call, so
// that a call that fails part way (out of memory) leaves none of them half-updated. The copy is one
// call per group of equal dtype, device and rank: ResNet-1001 has about 3000 such buffers, and
// ops of our own for each (a clone, or a detach and a reshape to flatten it) cost more host time
// on CUDA than the rest of the call's bookkeeping. Vectors are concatenated as they are and
// scalars (the batch counters) stacked (which views each inside, without the dispatcher's cost
// per op), so that only buffers of other ranks are flattened first.
class BufferRollback {
 public:
  BufferRollback(const ChainStages& stages, at::TensorList lifted_tensors) {
    for (int l = 1; l <= stages.size(); ++l) {
      for (size_t k : stages.stage(l).mutated_lifted) {
        if (stages.lifted()[k].kind == LiftedKind::Scalar) continue;
        const at::Tensor& live = lifted_tensors[stages.position(k)];
        if (!live.defined()) continue;
        Group& group = groupOf(live);
        group.live.push_back(live);
        group.sizes.push_back(live.sizes().vec());
      }
    }
    at::NoGradGuard no_grad;  // (so the buffers need no detach)
    for (auto& group : groups_) {
      if (group.rank == 0) {
        group.copy = at::stack(group.live);
      } else if (group.rank == 1) {
        group.copy = at::cat(group.live);
      } else {
        std::vector<at::Tensor> flat;
        flat.reserve(group.live.size());
        for (const auto& t : group.live) flat.push_back(t.reshape(-1));
        group.copy = at::cat(flat);
      }
    }
  }
  // Runs while the call's error unwinds, so it throws nothing of its own: a buffer that cannot be
  // put back is named in a warning, and the others are still restored. One that the failed call
  // resized (resize_) gets its shape back first.
  void restore() {
    at::NoGradGuard no_grad;
    for (auto& group : groups_) {
      int64_t offset = 0;
      for (size_t i = 0; i < group.live.size(); ++i) {
        const c10::IntArrayRef sizes = group.sizes[i];
        const int64_t n = c10::multiply_integers(sizes);
        try {
          // (resized itself: a detached alias would take the shape alone)
          if (group.live[i].sizes() != sizes) group.live[i].resize_(sizes);
          group.live[i].detach().copy_(group.copy.narrow(0, offset, n).view(sizes));
        } catch (const std::exception& e) {
          TORCH_WARN("jitckpt: could not restore a buffer of shape ", sizes,
                     " after the failed call: ", e.what());
        }
        offset += n;
      }
    }
  }

 private:
  struct Group {
    std::vector<at::Tensor> live;
    std::vector<std::vector<int64_t>> sizes;  // parallel to live, as copied
    int64_t rank = 0;                         // 0 and 1 as they are; any other rank flattened
    at::Tensor copy;  // the live tensors' values, flattened and concatenated in order
  };
  Group& groupOf(const at::Tensor& t) {
    const int64_t rank = std::min<int64_t>(t.dim(), 2);
    for (auto& group : groups_) {
      const at::Tensor& first = group.live.front();
      if (first.scalar_type() == t.scalar_type() && first.device() == t.device() &&
          group.rank == rank)
        return group;
    }
    Group& group = groups_.emplace_back();
    group.rank = rank;
    return group;
  }
  std::vector<Group> groups_;
};

// A training call on its executor: the unmodified model's own schedule where the plan has no
// recomputation (its graph, recorded as the model records it, costs the host no custom Function
// and no leaves, and autograd's own backward is the schedule's), else the schedule, forward here
// and the rest in the chain's backward.
std::vector<at::Tensor> runTraining(at::TensorList inputs, at::TensorList lifted_tensors,
                                    const c10::intrusive_ptr<ScheduleExecutor>& executor) {
  if (executor->recordsOnce()) return executor->runRecordedOnce();
  auto output_gradients = c10::make_intrusive<OutputGradients>();
  return handOffOutputs(ChainFunction::apply(inputs, lifted_tensors, executor, output_gradients),
                        output_gradients);
}

bool anyRequiresGrad(at::TensorList tensors) {
  for (const auto& t : tensors) {
    if (t.requires_grad()) return true;
  }
  return false;
}

}  // namespace

// GCC 14 warns (-Warray-bounds, -Wstringop-overflow) inside libstdc++'s vector<bool> as PyTorch's
// Function::apply inlines it: a false positive in their headers, kept off for this function only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
std::vector<at::Tensor> chainAutograd(at::TensorList inputs, at::TensorList lifted_tensors,
                                      const c10::List<c10::IValue>& lifted_scalars,
                                      const c10::intrusive_ptr<Plan>& plan) {
  const std::shared_ptr<const ForwardStart> start = takeForwardStart();  // before any allocation
  BufferRollback rollback(plan->stages(), lifted_tensors);
  try {
    if (!c10::GradMode::is_enabled() ||
        !(anyRequiresGrad(inputs) || anyRequiresGrad(lifted_tensors))) {
      c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
      return chainInference(inputs, lifted_tensors, lifted_scalars, plan);
    }
    const std::vector<at::Tensor> lifted = castSharedWeights(plan->stages(), lifted_tensors);
    auto executor = executorFor(inputs, lifted, lifted_scalars, plan, start.get());
    try {
      return runTraining(inputs, lifted, executor);
    } catch (const StageGrew& grew) {
      // The call runs again from where it began, on a plan for its larger sizes; the new plan's
      // costs hold this call's outputs, so it does not grow again.
      rollback.restore();
      executor->restoreRandomStateOfCallStart();
      const c10::intrusive_ptr<Plan> ran = executor->sharedPlan();
      executor.reset();
      executor = executorFor(inputs, lifted, lifted_scalars, plan, start.get(), &grew, ran);
      return runTraining(inputs, lifted, executor);
    }
  } catch (...) {  // out of memory, or any stage's error: the buffers go back to where they were
    rollback.restore();
    throw;
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

std::vector<at::Tensor> chainInference(at::TensorList inputs, at::TensorList lifted_tensors,
                                       const c10::List<c10::IValue>& lifted_scalars,
                                       const c10::intrusive_ptr<Plan>& plan) {
  takeForwardStart();  // ends the forward's probe: nothing is planned here
  ScheduleExecutor executor(plan, argumentsOf(inputs, lifted_tensors, lifted_scalars),
                            groupsStages() ? RunAs::Inference : RunAs::EveryStage);
  return executor.runInference();
}

}  // namespace jitckpt
