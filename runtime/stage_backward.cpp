// StageRunner's backward (see stage_runner.h): B of one recorded stage or of several in one call
// of the autograd engine, the autograd nodes that call needs, and runAsBackward.
#include <ATen/Functions.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/utils/grad_layout_contract.h>

#include <set>
#include <utility>

#include "runtime/stage_runner.h"

namespace jitckpt {
namespace {

// The root of a stage's backward: hands the gradients of the stage's outputs to autograd and
// keeps none, so that each is freed once the ops that read it have run, as in the unmodified model
// (autograd's own GraphRoot keeps them to the end).
struct ReleasingRoot : public torch::autograd::Node {
  ReleasingRoot(torch::autograd::edge_list edges, Tensors grads)
      : Node(std::move(edges)), grads_(std::move(grads)) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& /*unused*/) override {
    return std::move(grads_);
  }
  Tensors grads_;
};

// In a backward of several stages, where the gradient of a stage input goes when the stage
// below's output needs none: taking it runs, and so frees, what the stage saved for it, as B of
// that stage alone does. A 0-dim input, so that the engine sums the gradient down to one number
// on the way in (validate_outputs) instead of holding it, captured, to the end of the call.
struct GradientSink : public torch::autograd::Node {
  explicit GradientSink(const at::TensorOptions& options) {
    add_input_metadata(at::empty({}, options));
  }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& /*unused*/) override {
    return {};
  }
};

// Where a gradient the engine returns goes: a stage input, a lifted tensor, or nowhere.
enum class GradientTarget { Input, Lifted, Dropped };

// Lets the engine pass delta^{k-1} on itself in a backward of several stages (`run`, the top
// stage first): each stage's input edges lead on to the outputs of the stage below, or, where
// that output needs no gradient, to a GradientSink added to `wrt` (dropped; left out, the nodes
// that lead to it would not run and would hold what they saved to the end). Pushed past
// Node::add_next_edge, which refuses a node that already has parents (its topological number
// would change): the number only prunes a backward whose targets all lie above it, and this
// one's targets are leaves and input nodes.
void linkStages(const std::vector<RecordedStage>& run, torch::autograd::edge_list& wrt,
                std::vector<std::pair<GradientTarget, size_t>>& targets) {
  for (size_t i = 0; i + 1 < run.size(); ++i) {
    const auto& inputs = run[i].input_edges;
    const auto& below = run[i + 1].output_edges;
    TORCH_INTERNAL_ASSERT(inputs.size() == below.size(), "jitckpt: a stage takes ", inputs.size(),
                          " inputs where the stage below returns ", below.size());
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (!inputs[j].is_valid()) continue;
      torch::autograd::Edge next = below[j];
      if (!next.is_valid()) {
        next = torch::autograd::Edge(
            makeNode<GradientSink>(inputs[j].function->input_metadata(0).options()), 0);
        wrt.push_back(next);
        targets.emplace_back(GradientTarget::Dropped, j);
      }
      inputs[j].function->next_edges().push_back(std::move(next));
    }
  }
}

// torch::autograd::grad(roots, wrt, root_grads, allow_unused=true) on gradient edges, except that
// the roots' gradients are not held while the backward runs: the graph keeps what it saved, and
// what it did not (a residual sum) is freed at once. An invalid wrt edge gets no gradient.
Tensors gradientsOf(torch::autograd::edge_list root_edges, Tensors root_grads,
                    torch::autograd::edge_list wrt_edges) {
  // The root's own input is a placeholder it ignores (the engine needs one, with a device):
  // uninitialized, so that no kernel is launched for it.
  const at::Tensor placeholder = at::empty({}, root_grads.at(0).options());
  auto root = makeNode<ReleasingRoot>(std::move(root_edges), std::move(root_grads));
  root->add_input_metadata(placeholder);
  for (auto& edge : wrt_edges) {
    // Unreachable (allow_unused): an edge to a node of its own, as autograd::grad makes.
    if (!edge.is_valid()) edge = torch::autograd::Edge(makeNode<torch::autograd::Identity>(), 0);
  }
  const torch::autograd::edge_list start{torch::autograd::Edge(std::move(root), 0)};
  return torch::autograd::Engine::get_default_engine().execute(
      start, {placeholder}, /*keep_graph=*/false, /*create_graph=*/false,
      /*accumulate_grad=*/false, wrt_edges);
}

// A parameter's gradient laid out as AccumulateGrad keeps .grad (autograd's layout contract: the
// parameter's strides), made so as B returns it, as the unmodified model's AccumulateGrad copies
// it as it comes where .grad is not allocated (where it is, it adds in place: the copy here is
// then one transient more, which the profile counts). Handed to autograd otherwise (a Linear's
// over a transposed input comes out transposed), it would be copied there, at the end of the
// chain's backward, with every gradient held: a transient that the plan does not count. The same
// values. Sets `copied` when it copies.
at::Tensor laidOutForAccumulation(at::Tensor gradient, const at::Tensor& tensor, bool& copied) {
  if (!tensor.is_leaf() || gradient.layout() != at::kStrided || tensor.layout() != at::kStrided ||
      torch::autograd::utils::obeys_layout_contract(gradient, tensor))
    return gradient;
  copied = true;
  return torch::autograd::utils::clone_obey_contract(gradient, tensor);
}

// `gradient` as a tensor of its own, not a view: a view (a weight's gradient made transposed and
// transposed back) keeps its base, so its storage has two holders, and the engine adds the next
// gradient of a sum so far in place only where it holds the sum's storage alone. Out of place,
// the add is a transient the plan does not count. The same storage, nothing copied.
at::Tensor withoutViewBase(at::Tensor gradient) {
  if (!gradient.is_view()) return gradient;
  return gradient.detach();  // the view, and with it its hold on the base, ends here
}

struct CallbackNode : public torch::autograd::Node {
  explicit CallbackNode(std::function<void()> body) : body_(std::move(body)) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& /*unused*/) override {
    body_();
    return {};
  }
  std::function<void()> body_;
};

// The gradient edge of a lifted leaf (a parameter's stand-in): its grad accumulator, which B
// captures without running.
torch::autograd::Edge leafEdge(const at::Tensor& leaf) {
  auto node = torch::autograd::impl::try_get_grad_accumulator(leaf);
  if (!node) return {};
  return torch::autograd::Edge(std::move(node), 0);
}

}  // namespace

Tensors StageRunner::gradientTargets(int l) const {
  Tensors out;
  for (size_t k : stages_->stage(l).lifted) {
    if (stages_->lifted()[k].kind == LiftedKind::Scalar) continue;
    const at::Tensor& t = arguments_.lifted_tensors[stages_->position(k)];
    if (t.defined() && t.requires_grad()) out.push_back(t);
  }
  return out;
}

// The sums so far reach each leaf's InputBuffer first, straight from the root (the root's first
// edges), before any of the stage's own gradients: the engine then adds those as they arrive.
void StageRunner::takeLiftedSums(const RecordedStage& recorded, Tensors& lifted_sums,
                                 torch::autograd::edge_list& roots, Tensors& root_grads) const {
  torch::autograd::edge_list edges;
  Tensors sums;
  for (const auto& [position, leaf] : recorded.side_leaves) {
    at::Tensor& sum = lifted_sums.at(firstPosition(position));
    torch::autograd::Edge edge = leafEdge(leaf);
    if (!sum.defined() || !edge.is_valid()) continue;
    edges.push_back(std::move(edge));
    sums.push_back(std::exchange(sum, at::Tensor()));
  }
  roots.insert(roots.begin(), std::make_move_iterator(edges.begin()),
               std::make_move_iterator(edges.end()));
  root_grads.insert(root_grads.begin(), std::make_move_iterator(sums.begin()),
                    std::make_move_iterator(sums.end()));
}

void runAsBackward(c10::Device device, const std::function<void()>& body) {
  // The engine starts a node on the thread of its input's device (see gradientsOf); empty, so
  // that no memory a profile measures is allocated for it.
  const at::Tensor placeholder = at::empty({0}, at::TensorOptions().device(device));
  auto node = makeNode<CallbackNode>(body);
  node->add_input_metadata(placeholder);
  torch::autograd::Engine::get_default_engine().execute(
      {torch::autograd::Edge(std::move(node), 0)}, {placeholder}, /*keep_graph=*/false,
      /*create_graph=*/false, /*accumulate_grad=*/true);
}

std::unordered_set<size_t> StageRunner::liftedPositions(const RecordedStage& recorded) const {
  std::unordered_set<size_t> positions;
  for (const auto& [position, leaf] : recorded.side_leaves)
    positions.insert(firstPosition(position));
  return positions;
}

bool StageRunner::joinsBackwardRun(const RecordedStage& above, const RecordedStage& below,
                                   std::unordered_set<size_t>& positions,
                                   const Tensors& lifted_sums) const {
  // Each device's nodes run on its own thread: the stage below could start on one before the
  // stage above is done on the other.
  if (devices_.size() > 1) return false;
  if (above.first_sequence_nr < below.end_sequence_nr) return false;
  if (stages_->copiesParameterGradients(above.stage)) return false;
  std::set<std::pair<const torch::autograd::Node*, uint32_t>> edges;
  for (const auto& e : below.output_edges) {
    if (e.is_valid() && !edges.emplace(e.function.get(), e.input_nr).second) return false;
  }
  const std::unordered_set<size_t> own = liftedPositions(below);
  for (size_t first : own) {
    if (positions.count(first) || lifted_sums.at(first).defined()) return false;
  }
  positions.insert(own.begin(), own.end());
  return true;
}

StageGradients StageRunner::backward(int /*l*/, RecordedStage recorded, Tensors output_grads,
                                     Tensors* lifted_sums) {
  std::vector<RecordedStage> run;
  run.push_back(std::move(recorded));
  return backward(std::move(run), std::move(output_grads), lifted_sums);
}

StageGradients StageRunner::backward(std::vector<RecordedStage> run, Tensors output_grads,
                                     Tensors* lifted_sums) {
  TORCH_INTERNAL_ASSERT(!run.empty() && output_grads.size() == run.front().output_edges.size());
  for (auto& recorded : run) recorded.releaseOutputs();  // the edges keep the graphs alive
  // What the gradient is taken with respect to (`targets` says where each result goes): the
  // sinks of linkStages, the lowest stage's inputs that get one, and the stand-ins of the lifted
  // tensors that require grad.
  torch::autograd::edge_list wrt;
  std::vector<std::pair<GradientTarget, size_t>> targets;
  linkStages(run, wrt, targets);
  RecordedStage& top = run.front();
  RecordedStage& bottom = run.back();
  torch::autograd::edge_list roots;
  Tensors root_grads;
  for (size_t i = 0; i < top.output_edges.size(); ++i) {
    if (top.output_edges[i].is_valid() && output_grads[i].defined()) {
      roots.push_back(std::move(top.output_edges[i]));
      root_grads.push_back(std::move(output_grads[i]));
    }
  }
  if (!roots.empty() && lifted_sums != nullptr)
    takeLiftedSums(top, *lifted_sums, roots, root_grads);
  output_grads.clear();
  for (size_t i = 0; i < bottom.input_edges.size(); ++i) {
    if (!bottom.input_edges[i].is_valid()) continue;
    wrt.push_back(bottom.input_edges[i]);
    targets.emplace_back(GradientTarget::Input, i);
  }
  std::vector<int> target_stages;  // per lifted target: the stage whose leaf it is
  for (auto& recorded : run) {
    for (auto& [position, leaf] : recorded.side_leaves) {
      TORCH_INTERNAL_ASSERT(&recorded == &top || lifted_sums == nullptr ||
                                !lifted_sums->at(firstPosition(position)).defined(),
                            "jitckpt: a backward of several stages would take a sum so far");
      wrt.push_back(leafEdge(leaf));
      targets.emplace_back(GradientTarget::Lifted, position);
      target_stages.resize(targets.size() - 1, 0);
      target_stages.push_back(recorded.stage);
    }
  }
  StageGradients gradients;
  gradients.inputs.resize(bottom.input_edges.size());
  run.clear();  // the graphs live on in the edges (and each node in the engine until it has run)
  if (roots.empty() || wrt.empty()) return gradients;
  Tensors computed = gradientsOf(std::move(roots), std::move(root_grads), std::move(wrt));
  for (size_t i = 0; i < computed.size(); ++i) {
    if (!computed[i].defined()) continue;
    const auto [target, index] = targets[i];
    if (target == GradientTarget::Input) {
      gradients.inputs[index] = std::move(computed[i]);
    } else if (target == GradientTarget::Lifted) {
      bool copied = false;
      gradients.lifted.emplace_back(
          index,
          laidOutForAccumulation(std::move(computed[i]), arguments_.lifted_tensors[index], copied));
      if (copied && target_stages.at(i) > 0) stages_->setCopiesParameterGradients(target_stages[i]);
    }
  }
  return gradients;
}

Tensors StageRunner::backwardRun(std::vector<RecordedStage> run, Tensors output_grads,
                                 Tensors& lifted_sums) {
  // A tensor lifted more than once (one parameter reached through several attribute paths: tied
  // or shared weights) gets its gradients summed at one position, the first, in the order the
  // stages' B run, each B adding its uses to the sum so far (StageRunner::backward): the order in
  // which the unmodified model's engine adds them in the parameter's InputBuffer (the last use
  // first). Left at each stage's own position, the op would return several gradients for one
  // tensor and autograd would add them in the op's input order, the first use first: with three
  // uses or more, (g1 + g2) + g3 instead of (g3 + g2) + g1, other bits.
  StageGradients gradients = backward(std::move(run), std::move(output_grads), &lifted_sums);
  for (auto& [position, gradient] : gradients.lifted) {
    at::Tensor& sum = lifted_sums.at(firstPosition(position));
    TORCH_INTERNAL_ASSERT(!sum.defined(),
                          "jitckpt: a run of B returned a gradient without taking the sum so far");
    sum = withoutViewBase(std::move(gradient));
  }
  return std::move(gradients.inputs);
}

}  // namespace jitckpt
