// StageRunner (see stage_runner.h).
#include "runtime/stage_runner.h"

#include <ATen/Functions.h>
#include <ATen/SequenceNumber.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/basic_ops.h>

#include <algorithm>
#include <set>
#include <unordered_map>
#include <utility>

#include "runtime/error_text.h"

namespace jitckpt {
namespace {

bool contains(const std::vector<size_t>& list, size_t value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

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
            std::make_shared<GradientSink>(inputs[j].function->input_metadata(0).options()), 0);
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
  auto root = std::make_shared<ReleasingRoot>(std::move(root_edges), std::move(root_grads));
  root->add_input_metadata(placeholder);
  for (auto& edge : wrt_edges) {
    // Unreachable (allow_unused): an edge to a node of its own, as autograd::grad makes.
    if (!edge.is_valid())
      edge = torch::autograd::Edge(std::make_shared<torch::autograd::Identity>(), 0);
  }
  const torch::autograd::edge_list start{torch::autograd::Edge(std::move(root), 0)};
  return torch::autograd::Engine::get_default_engine().execute(
      start, {placeholder}, /*keep_graph=*/false, /*create_graph=*/false,
      /*accumulate_grad=*/false, wrt_edges);
}

// Runs a stage under the autocast state of the call (torch.autocast is thread-local: a
// recomputation in the backward runs on autograd's thread, outside the caller's context, and
// torch.utils.checkpoint restores it the same way), and keeps autocast's cache of cast weights
// to the stage: the cache holds every cast until the caller's outermost autocast region ends, so
// that casts made by the stages would pile up over the whole forward, outside the plan.
//  - A recording run (`records`) casts each weight once, as the unmodified model does (a weight
//    an LSTM reads at every step: its gradient is summed in the autocast dtype), and empties the
//    cache when it ends. What the stage's graph saved of its casts stays with the graph, counted
//    in abar by the profile.
//  - Other runs compute values only: with the cache off, a cast lives as long as the op that
//    reads it, and none is left in the cache. (Cached, a cast made without grad would also be
//    handed to a later use of the same weight under grad outside the chain, without its
//    gradient.)
class AutocastScope {
 public:
  AutocastScope(const AutocastState& call, bool records) : saved_(AutocastState::current()) {
    AutocastState stage = call;
    stage.cache = call.cache && records;
    clears_ = stage.cache && (call.cpu || call.cuda);
    active_ = !stage.sameCasts(saved_) || stage.cache != saved_.cache;
    if (active_) stage.makeCurrent();
  }
  ~AutocastScope() {
    if (clears_) at::autocast::clear_cache();
    if (active_) saved_.makeCurrent();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState saved_;
  bool active_ = false;
  bool clears_ = false;
};

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

// Whether `v` is, or holds in a list, tuple or dict, a tensor that requires grad.
bool holdsTensorRequiringGrad(const c10::IValue& v) {
  bool found = false;
  v.visit([&](const c10::IValue& inner) {
    if (inner.isTensor() && inner.toTensor().defined() && inner.toTensor().requires_grad())
      found = true;
    return found;  // true: stop descending
  });
  return found;
}

}  // namespace

std::string typeOf(const at::Tensor& t) {
  return t.defined() ? std::string(c10::toString(t.scalar_type())) + "@" + t.device().str()
                     : "none";
}

std::optional<c10::Device> chainDevice(const ChainArguments& arguments) {
  std::optional<c10::Device> device;
  for (const auto* tensors : {&arguments.inputs, &arguments.lifted_tensors}) {
    for (const auto& t : *tensors) {
      if (t.defined() && !t.is_cpu()) return t.device();
      if (t.defined()) device = t.device();
    }
  }
  return device;
}

std::vector<size_t> firstPositions(const Tensors& lifted) {
  std::vector<size_t> first(lifted.size());
  std::unordered_map<const c10::TensorImpl*, size_t> seen;
  seen.reserve(lifted.size());
  for (size_t position = 0; position < lifted.size(); ++position) {
    const at::Tensor& t = lifted[position];
    first[position] =
        t.defined() ? seen.emplace(t.unsafeGetTensorImpl(), position).first->second : position;
  }
  return first;
}

InputKey inputKey(const ChainStages& stages, const ChainArguments& arguments) {
  InputKey key;
  auto add = [&](const at::Tensor& t) {
    key.shapes.push_back(t.defined() ? t.sizes().vec() : std::vector<int64_t>{});
    key.types.push_back(typeOf(t));
  };
  for (const auto& t : arguments.inputs) add(t);
  std::vector<std::string> parameter_types;
  std::vector<std::pair<at::ScalarType, c10::Device>> parameter_kinds;
  for (size_t k = 0; k < stages.lifted().size(); ++k) {
    const size_t position = stages.position(k);
    const LiftedKind kind = stages.lifted()[k].kind;
    if (kind == LiftedKind::Side && position < arguments.lifted_tensors.size()) {
      add(arguments.lifted_tensors[position]);
    } else if (kind == LiftedKind::Scalar && position < arguments.lifted_scalars.size() &&
               arguments.lifted_scalars[position].isTensor()) {
      add(arguments.lifted_scalars[position].toTensor());
    } else if (kind != LiftedKind::Scalar && position < arguments.lifted_tensors.size() &&
               arguments.lifted_tensors[position].defined()) {
      const at::Tensor& t = arguments.lifted_tensors[position];
      // Named once per (dtype, device): thousands of parameters share a few.
      if (std::none_of(parameter_kinds.begin(), parameter_kinds.end(), [&](const auto& seen) {
            return seen.first == t.scalar_type() && seen.second == t.device();
          })) {
        parameter_kinds.emplace_back(t.scalar_type(), t.device());
        parameter_types.push_back(typeOf(t));
      }
    }
  }
  std::sort(parameter_types.begin(), parameter_types.end());
  std::string parameters = "parameters and buffers:";
  for (const auto& type : parameter_types) parameters += " " + type;
  // Under autocast the stages hold other tensors (casts, activations in another dtype).
  const AutocastState autocast = AutocastState::current();
  if (const auto device = chainDevice(arguments)) {
    if (device->is_cpu() && autocast.cpu) {
      parameters += ", under autocast to " + std::string(c10::toString(autocast.cpu_dtype));
    } else if (device->is_cuda() && autocast.cuda) {
      parameters += ", under autocast to " + std::string(c10::toString(autocast.cuda_dtype));
    }
  }
  key.types.push_back(parameters);
  return key;
}

std::string InputKey::str() const {
  std::string text;
  for (size_t i = 0; i < shapes.size(); ++i) {
    text += (i ? ", " : "") + c10::str(c10::IntArrayRef(shapes[i]));
    if (i < types.size()) text += " " + types[i];
  }
  if (types.size() > shapes.size()) text += "; " + types.back();
  return text;
}

// Under autocast the unmodified model casts a weight once per autocast region and sums the
// gradients of its uses in the autocast dtype; the stages keep autocast's cache to themselves
// (AutocastScope), so a weight that several stages cast gets those parts summed in float32.
void StageRunner::warnOfWeightsCastBySeveralStages() const {
  const auto device = chainDevice(arguments_);
  if (!device || !((device->is_cpu() && autocast_.cpu) || (device->is_cuda() && autocast_.cuda)))
    return;
  std::unordered_map<size_t, int> first_stage;  // first position -> the first stage casting it
  for (int l = 1; l <= stages_->size(); ++l) {
    for (size_t j : stages_->castLifted(l)) {
      const size_t k = stages_->stage(l).lifted[j];
      const auto [it, inserted] = first_stage.emplace(first_positions_[stages_->position(k)], l);
      if (inserted || it->second == l) continue;
      if (!stages_->firstCastWarning()) return;
      TORCH_WARN("jitckpt: under autocast, stages ", it->second, " and ", l, " both cast '",
                 stages_->lifted()[k].name,
                 "' to the autocast dtype, each for itself (autocast's cache of casts is "
                 "kept to one stage, so that casts do not pile up over the forward): its "
                 "gradient sums their parts in float32 where the unmodified model sums them "
                 "in the autocast dtype, and differs from it in the last bits");
      return;
    }
  }
}

StageRunner::StageRunner(std::shared_ptr<const ChainStages> stages, ChainArguments arguments,
                         BufferWrites buffer_writes)
    : stages_(std::move(stages)),
      arguments_(std::move(arguments)),
      buffer_writes_(buffer_writes),
      first_positions_(firstPositions(arguments_.lifted_tensors)),
      ran_(stages_->size() + 1, false),
      rng_(stages_->size() + 1),
      scratch_(stages_->size() + 1),
      first_write_(arguments_.lifted_tensors.size(), 0),
      last_write_(arguments_.lifted_tensors.size(), 0),
      first_run_values_(stages_->size() + 1),
      autocast_(AutocastState::current()) {
  TORCH_CHECK(arguments_.lifted_tensors.size() == stages_->numLiftedTensors() &&
                  arguments_.lifted_scalars.size() == stages_->numLiftedScalars(),
              "jitckpt::chain: the plan expects ", stages_->numLiftedTensors(),
              " lifted tensors and ", stages_->numLiftedScalars(), " lifted scalars but got ",
              arguments_.lifted_tensors.size(), " and ", arguments_.lifted_scalars.size(),
              "; the module and its plan do not match (re-run jitckpt.checkpoint on the original "
              "module)");
  TORCH_CHECK(arguments_.inputs.size() == stages_->stage(1).num_activation_inputs,
              "jitckpt::chain: got ", arguments_.inputs.size(),
              " chain inputs for a plan whose first stage takes ",
              stages_->stage(1).num_activation_inputs);
  for (size_t k = 0; k < stages_->lifted().size(); ++k) {
    if (stages_->lifted()[k].kind != LiftedKind::Scalar) continue;
    TORCH_CHECK(
        !holdsTensorRequiringGrad(arguments_.lifted_scalars[stages_->position(k)]),
        "jitckpt::chain: '", stages_->lifted()[k].name,
        "' holds a tensor that requires grad but reaches the chain inside an Optional, list, "
        "tuple or object, through which jitckpt cannot return a gradient; pass it as a "
        "Tensor (a parameter, buffer or forward input; where it is forward's own "
        "Optional[Tensor] argument, declare it Tensor and pass zeros for none)");
  }
  auto noteDevice = [&](const at::Tensor& t) {
    if (t.defined() && !t.is_cpu() &&
        std::find(devices_.begin(), devices_.end(), t.device()) == devices_.end()) {
      devices_.push_back(t.device());
    }
  };
  for (const auto& t : arguments_.inputs) {
    input_requires_grad_ = input_requires_grad_ || t.requires_grad();
    noteDevice(t);
  }
  for (const auto& t : arguments_.lifted_tensors) noteDevice(t);
  for (int l = 1; l <= stages_->size(); ++l) {
    for (size_t k : stages_->stage(l).mutated_lifted) {
      if (stages_->lifted()[k].kind == LiftedKind::Scalar) continue;
      const size_t first = first_positions_[stages_->position(k)];
      if (first_write_[first] == 0) first_write_[first] = l;
      last_write_[first] = l;
    }
  }
  if (buffer_writes_ == BufferWrites::FirstRunUpdates) keepEntryValues();
  warnOfWeightsCastBySeveralStages();
  // Scratch copies are made up front, so that measurements never see them allocated.
  if (buffer_writes_ == BufferWrites::Scratch) {
    for (int l = 1; l <= stages_->size(); ++l) {
      for (size_t k : stages_->stage(l).mutated_lifted) {
        if (stages_->lifted()[k].kind == LiftedKind::Scalar) continue;
        const at::Tensor& live = arguments_.lifted_tensors[stages_->position(k)];
        if (live.defined()) scratch_[l][k] = live.detach().clone();
      }
    }
  }
}

c10::IValue StageRunner::liftedValue(int l, size_t j, bool recomputation) {
  const size_t k = stages_->stage(l).lifted[j];
  const size_t position = stages_->position(k);
  if (stages_->lifted()[k].kind == LiftedKind::Scalar) return arguments_.lifted_scalars[position];
  const at::Tensor& live = arguments_.lifted_tensors[position];
  // An Optional[Tensor] attribute holding None (conv bias=False) reaches the stage as None.
  if (!live.defined()) return c10::IValue();
  const bool writes = contains(stages_->stage(l).mutated_lifted, k);
  if (buffer_writes_ == BufferWrites::Scratch) return writes ? scratch_[l].at(k) : live;
  // Buffers are updated once per step: a recomputation reads what the first run read (a spectral
  // norm's vector, a counter; BatchNorm in training reads none of its statistics) and writes to
  // a clone.
  const at::Tensor seen = stages_->readsValue(l, j) ? valueAtFirstRun(l, j, !recomputation) : live;
  return recomputation && writes ? seen.detach().clone() : seen;
}

at::Tensor StageRunner::valueAtFirstRun(int l, size_t j, bool first_run) {
  const size_t k = stages_->stage(l).lifted[j];
  const at::Tensor& live = arguments_.lifted_tensors[stages_->position(k)];
  const size_t first = first_positions_[stages_->position(k)];
  // First runs go in stage order: a tensor no stage from l on writes still holds what l read,
  // and one no stage before l wrote holds what the call began with.
  if (first_run || last_write_[first] < l) {
    if (first_run && last_write_[first] >= l && first_write_[first] < l)
      first_run_values_[l][k] = live.detach().clone();
    return live;
  }
  if (first_write_[first] >= l) return entry_values_.at(first);
  const auto found = first_run_values_[l].find(k);
  TORCH_INTERNAL_ASSERT(found != first_run_values_[l].end(), "stage ", l,
                        " recomputed without a copy of '", stages_->lifted()[k].name,
                        "' from its first run");
  return found->second;
}

// The tensors a stage reads before their first write: copied once, as the call began.
void StageRunner::keepEntryValues() {
  for (int l = 1; l <= stages_->size(); ++l) {
    const StageSpec& stage = stages_->stage(l);
    for (size_t j = 0; j < stage.lifted.size(); ++j) {
      const size_t k = stage.lifted[j];
      if (stages_->lifted()[k].kind == LiftedKind::Scalar || !stages_->readsValue(l, j)) continue;
      const at::Tensor& live = arguments_.lifted_tensors[stages_->position(k)];
      const size_t first = first_positions_[stages_->position(k)];
      if (live.defined() && first_write_[first] >= l && !entry_values_.count(first))
        entry_values_[first] = live.detach().clone();
    }
  }
}

bool StageRunner::entersAsLeaf(size_t k) const {
  if (stages_->lifted()[k].kind == LiftedKind::Scalar) return false;
  const at::Tensor& t = arguments_.lifted_tensors[stages_->position(k)];
  return t.defined() && t.requires_grad();
}

Tensors StageRunner::run(int l, const Tensors& activations, Mode mode,
                         std::vector<std::pair<size_t, at::Tensor>>* side_leaves) {
  const StageSpec& stage = stages_->stage(l);
  const bool recomputation = ran_[l];
  c10::AutoGradMode grad_mode(mode == Mode::Inference ? c10::GradMode::is_enabled()
                                                      : mode == Mode::Record);
  torch::jit::Stack stack;
  stack.reserve(activations.size() + stage.lifted.size());
  for (const auto& t : activations) {
    // The copy is made under the stage's grad mode, so that when recording, the gradient flows
    // through it to the leaf.
    stack.emplace_back(stage.writes_activation_input ? t.clone() : t);
  }
  for (size_t j = 0; j < stage.lifted.size(); ++j) {
    const size_t k = stage.lifted[j];
    if (side_leaves && entersAsLeaf(k)) {
      // One leaf per tensor among those `side_leaves` holds: a tensor lifted twice (tied weights)
      // gets one, and so does one that several stages read in a whole-graph run, where autograd
      // then adds all its uses in one buffer, in the unmodified model's order.
      const at::Tensor& live = arguments_.lifted_tensors[stages_->position(k)];
      auto same = std::find_if(side_leaves->begin(), side_leaves->end(), [&](const auto& entry) {
        return arguments_.lifted_tensors[entry.first].is_same(live);
      });
      if (same == side_leaves->end()) {
        side_leaves->emplace_back(stages_->position(k), live.detach().requires_grad_());
        same = std::prev(side_leaves->end());
      }
      stack.emplace_back(same->second);
    } else {
      stack.push_back(liftedValue(l, j, recomputation));
    }
  }
  // Random ops see the same numbers on recomputation: replay the generator state of the first
  // run, then put back the state the rest of the step expects.
  std::optional<RngState> resume;
  if (stages_->hasRandomOps(l)) {
    if (!rng_[l]) {
      rng_[l] = RngState::capture(devices_);
    } else {
      resume = RngState::capture(devices_);
      rng_[l]->restore();
    }
  }
  try {
    const AutocastScope autocast(autocast_, mode == Mode::Record);
    torch::jit::InterpreterState(stages_->code(l)).run(stack);
  } catch (const std::exception& e) {  // c10::Error, and the interpreter's own errors
    if (resume) resume->restore();
    TORCH_CHECK(false, "jitckpt: stage ", l, " (", stage.label, ") failed: ", reasonOf(e));
  }
  if (resume) resume->restore();
  ran_[l] = true;
  Tensors outputs;
  outputs.reserve(stack.size());
  for (auto& v : stack) {
    TORCH_INTERNAL_ASSERT(v.isTensor(), "stage ", l, " (", stage.label, ") returned a ",
                          v.tagKind(), " where the partition promised a tensor");
    outputs.push_back(std::move(v).toTensor());
  }
  return outputs;
}

Tensors StageRunner::forward(int l, const Tensors& activations) {
  if (stages_->hasAutogradDependentKernels(l)) {
    Tensors outputs = recordedForward(l, activations).outputs;  // the graph goes with it
    for (auto& t : outputs) t = t.detach();
    return outputs;
  }
  Tensors detached;
  detached.reserve(activations.size());
  for (const auto& t : activations) detached.push_back(t.detach());
  return run(l, detached, Mode::Forward);
}

Tensors StageRunner::inference(int l, const Tensors& activations) {
  return run(l, activations, Mode::Inference);
}

bool RecordedStage::inputsGetGradients() const {
  return std::any_of(input_edges.begin(), input_edges.end(),
                     [](const auto& e) { return e.is_valid(); });
}

bool RecordedStage::outputsHaveGradients() const {
  return std::any_of(output_edges.begin(), output_edges.end(),
                     [](const auto& e) { return e.is_valid(); });
}

RecordedStage StageRunner::recordedForward(int l, const Tensors& activations) {
  RecordedStage recorded;
  recorded.first_sequence_nr = at::sequence_number::peek();
  const bool gradient_flows = l > 1 || input_requires_grad_;
  Tensors inputs;
  for (const auto& t : activations) {
    at::Tensor input = t.detach();
    torch::autograd::Edge edge;
    if (gradient_flows && t.is_floating_point()) {
      // A node of the input's own, holding only its metadata: B captures what reaches it. A
      // leaf's AccumulateGrad would hold the input's storage as long as the graph lives.
      auto node = std::make_shared<torch::autograd::Identity>();
      node->add_input_metadata(input);
      edge = torch::autograd::Edge(std::move(node), 0);
      torch::autograd::impl::set_gradient_edge(input, edge);
    }
    recorded.input_edges.push_back(std::move(edge));
    inputs.push_back(std::move(input));
  }
  recorded.outputs = run(l, inputs, Mode::Record, &recorded.side_leaves);
  for (const auto& t : recorded.outputs) {
    recorded.output_edges.push_back(t.defined() && t.requires_grad()
                                        ? torch::autograd::impl::gradient_edge(t)
                                        : torch::autograd::Edge());
  }
  // (after gradient_edge, which makes a node for a view whose base was written in place)
  recorded.end_sequence_nr = at::sequence_number::peek();
  return recorded;
}

Tensors StageRunner::wholeGraphForward(int l, const Tensors& activations,
                                       std::vector<std::pair<size_t, at::Tensor>>* side_leaves) {
  return run(l, activations, Mode::Record, side_leaves);
}

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
  auto node = std::make_shared<CallbackNode>(body);
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
  for (auto& recorded : run) {
    for (auto& [position, leaf] : recorded.side_leaves) {
      TORCH_INTERNAL_ASSERT(&recorded == &top || lifted_sums == nullptr ||
                                !lifted_sums->at(firstPosition(position)).defined(),
                            "jitckpt: a backward of several stages would take a sum so far");
      wrt.push_back(leafEdge(leaf));
      targets.emplace_back(GradientTarget::Lifted, position);
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
      gradients.lifted.emplace_back(index, std::move(computed[i]));
    }
  }
  return gradients;
}

}  // namespace jitckpt
