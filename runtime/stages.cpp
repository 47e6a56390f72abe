// ChainStages (see stages.h).
#include "runtime/stages.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "runtime/autocast_block.h"
#include "runtime/compat.h"
#include "runtime/data_sizes.h"
#include "runtime/never_requires_grad.h"
#include "runtime/weight_operands.h"

namespace jitckpt {
namespace {

bool containsNode(const torch::jit::Block* block,
                  const std::function<bool(const torch::jit::Node*)>& is) {
  for (const torch::jit::Node* n : block->nodes()) {
    if (is(n)) return true;
    for (const auto* b : n->blocks()) {
      if (containsNode(b, is)) return true;
    }
  }
  return false;
}

const std::unordered_set<std::string>& recurrentKinds() {
  static const std::unordered_set<std::string> kinds = {"aten::lstm", "aten::gru", "aten::rnn_tanh",
                                                        "aten::rnn_relu"};
  return kinds;
}

// Ops whose CPU or CUDA kernel depends on grad mode and on which inputs require grad (PyTorch
// 2.x picks oneDNN's inference or training RNN kernels, or the native one, by them; on the CPU
// max_pool1d runs its own kernel only where no gradient is needed, whose output strides differ
// from max_pool1d_with_indices' on a transposed input, and so do the bits of what reads it).
bool choosesKernelByAutograd(const torch::jit::Node* n) {
  const std::string kind = n->kind().toQualString();
  return recurrentKinds().count(kind) > 0 || kind == "aten::scaled_dot_product_attention" ||
         kind == "aten::max_pool1d";
}

// A list of tensors whose op may cast them for autocast (an LSTM's weights), unless every reader
// is a Function the export front end keeps whole: a Function's forward runs with grad off, where
// autocast caches no cast.
bool listMayBeCast(const torch::jit::Node* list) {
  const auto& uses = list->output()->uses();
  return std::any_of(uses.begin(), uses.end(), [](const torch::jit::Use& use) {
    return std::string(use.user->kind().ns().toUnqualString()) != "jitckpt_functions";
  });
}

// Ops that autocast runs in its lower-precision dtype, casting their float32 arguments first: a
// weight they read directly is cast, and the cast cached while the autocast region lasts.
bool castsForAutocast(const torch::jit::Node* n) {
  static const std::unordered_set<std::string> kinds = {"aten::_convolution",
                                                        "aten::conv1d",
                                                        "aten::conv2d",
                                                        "aten::conv3d",
                                                        "aten::conv_tbc",
                                                        "aten::conv_transpose1d",
                                                        "aten::conv_transpose2d",
                                                        "aten::conv_transpose3d",
                                                        "aten::convolution",
                                                        "aten::prelu",
                                                        "aten::addmm",
                                                        "aten::addmv",
                                                        "aten::addr",
                                                        "aten::matmul",
                                                        "aten::einsum",
                                                        "aten::mm",
                                                        "aten::mv",
                                                        "aten::linear",
                                                        "aten::addbmm",
                                                        "aten::baddbmm",
                                                        "aten::bmm",
                                                        "aten::chain_matmul",
                                                        "aten::linalg_multi_dot",
                                                        "aten::lstm_cell",
                                                        "aten::gru_cell",
                                                        "aten::rnn_tanh_cell",
                                                        "aten::rnn_relu_cell",
                                                        "aten::lstm",
                                                        "aten::gru",
                                                        "aten::rnn_tanh",
                                                        "aten::rnn_relu"};
  return kinds.count(n->kind().toQualString()) > 0;
}

// Of those, the ones autocast casts on the CPU and on CUDA, on every supported PyTorch line.
bool castsOnEveryDevice(const torch::jit::Node* n) {
  static const std::unordered_set<std::string> kinds = {
      "aten::linear", "aten::mm",     "aten::bmm",    "aten::addmm", "aten::baddbmm",
      "aten::addbmm", "aten::conv1d", "aten::conv2d", "aten::conv3d"};
  return kinds.count(n->kind().toQualString()) > 0;
}

// Whether chain output i is read by an op of a stage: followed back from stage L through the
// stages that pass it on, to the one that makes it.
bool readInside(const std::vector<StageSpec>& stages, size_t i) {
  for (size_t s = stages.size(); s-- > 0;) {
    const torch::jit::Graph& graph = *stages[s].graph;
    const torch::jit::Value* v = graph.outputs().at(i);
    for (const torch::jit::Use& use : v->uses()) {
      if (use.user != graph.return_node()) return true;
    }
    if (v->node() != graph.param_node() || v->offset() >= stages[s].num_activation_inputs)
      return false;   // made here, or a lifted value
    i = v->offset();  // passed on from the stage before
  }
  return false;
}

}  // namespace

std::vector<size_t> directlyWrittenInputs(const torch::jit::Node* n) {
  std::vector<size_t> written;
  const std::string kind = n->kind().toQualString();
  if (kind == "aten::batch_norm" || kind == "aten::instance_norm") return {3, 4};
  const auto* schema = n->maybeSchema();
  if (!schema) return written;
  for (size_t a = 0; a < schema->arguments().size() && a < n->inputs().size(); ++a) {
    const auto* alias = schema->arguments()[a].alias_info();
    if (alias && alias->isWrite()) written.push_back(a);
  }
  return written;
}

bool drawsRandomNumbers(const torch::jit::Node* n) {
  if (n->isNondeterministic() || recurrentKinds().count(n->kind().toQualString()) > 0 ||
      n->kind() == c10::prim::PythonOp)
    return true;
  static const auto autocast_block = c10::Symbol::fromQualString("jitckpt::autocast_block");
  if (n->kind() == autocast_block) {
    const auto block = torch::jit::constant_as<int64_t>(n->input(0));
    return !block || containsNode(autocastBlockGraph(*block)->block(), drawsRandomNumbers);
  }
  // TorchScript reads the tag of aten ops alone (and with their train flag, above).
  const auto* op = n->kind().is_aten() ? nullptr : n->maybeOperator();
  if (op == nullptr) return false;
  const auto tags = op->getTags();
  return std::find(tags.begin(), tags.end(), at::Tag::nondeterministic_seeded) != tags.end();
}

bool dropsOutBetweenLayers(const torch::jit::Node* n) {
  if (recurrentKinds().count(n->kind().toQualString()) == 0 || !n->maybeSchema()) return false;
  const auto dropout = torch::jit::toIValue(n->namedInput("dropout"));
  const auto train = torch::jit::toIValue(n->namedInput("train"));
  return !(dropout && dropout->isDouble() && dropout->toDouble() == 0.0) &&
         !(train && train->isBool() && !train->toBool());
}

std::vector<int> ChainStages::stagesThatRunOnce(c10::Device device) const {
  const bool cudnn = device.is_cuda() && at::globalContext().userEnabledCuDNN();
  std::vector<int> once;
  for (int l = 1; l <= size(); ++l) {
    if ((cudnn && recurrent_dropout_[static_cast<size_t>(l - 1)]) ||
        std::binary_search(steered_by_data_.begin(), steered_by_data_.end(), l))
      once.push_back(l);
  }
  return once;
}

std::string toString(LiftedKind kind) {
  switch (kind) {
    case LiftedKind::Parameter:
      return "parameter";
    case LiftedKind::Buffer:
      return "buffer";
    case LiftedKind::Scalar:
      return "scalar";
    case LiftedKind::Side:
      return "side";
  }
  return "?";
}

namespace {

// Whether a use of a tensor can carry its value to what the graph computes: not as the tensor an
// in-place op writes (whose result is unused), nor as BatchNorm's or InstanceNorm's running
// statistics (read in eval only, when nothing writes them).
bool carriesValue(const torch::jit::Use& use) {
  const torch::jit::Node* n = use.user;
  const auto written = directlyWrittenInputs(n);
  if (std::find(written.begin(), written.end(), use.offset) == written.end()) return true;
  const std::string name = n->kind().toQualString();
  if (name == "aten::batch_norm" || name == "aten::instance_norm") return false;
  return n->outputs().size() != 1 || n->output()->hasUses();
}

bool valueIsRead(const torch::jit::Value* v) {
  for (const auto& use : v->uses()) {
    if (carriesValue(use)) return true;
  }
  return false;
}

}  // namespace

ChainStages::ChainStages(const std::vector<StageSpec>& stages, std::vector<LiftedSpec> lifted)
    : copies_gradients_(stages.size()), lifted_(std::move(lifted)) {
  TORCH_CHECK(!stages.empty(), "jitckpt: a chain needs at least one stage");
  size_t scalars = 0;
  for (const LiftedSpec& l : lifted_) {
    position_.push_back(l.kind == LiftedKind::Scalar ? scalars++ : num_tensors_++);
  }
  // Per lifted value: the stages that read it, and whether each reads it only as an argument of
  // ops that autocast casts on every device (castWhereverRead).
  std::vector<int> reading_stages(lifted_.size(), 0);
  std::vector<bool> only_cast(lifted_.size(), true);
  auto noteReads = [&](size_t k, const torch::jit::use_list& uses) {
    if (uses.empty()) return;
    ++reading_stages[k];
    only_cast[k] = only_cast[k] && std::all_of(uses.begin(), uses.end(), [](const auto& use) {
                     return castsOnEveryDevice(use.user);
                   });
  };
  for (size_t s = 0; s < stages.size(); ++s) {
    StageSpec stage = stages[s];
    TORCH_CHECK(stage.graph, "jitckpt: stage ", s + 1, " has no graph");
    stage.graph = stage.graph->copy();
    TORCH_CHECK(stage.graph->inputs().size() == stage.num_activation_inputs + stage.lifted.size(),
                "jitckpt: stage ", s + 1, " (", stage.label, ") has ", stage.graph->inputs().size(),
                " graph inputs, expected ", stage.num_activation_inputs, " activations and ",
                stage.lifted.size(), " lifted values");
    for (size_t j = 0; j < stage.lifted.size(); ++j) {
      const size_t k = stage.lifted[j];
      TORCH_CHECK(k < lifted_.size(), "jitckpt: stage ", s + 1, " reads lifted value ", k, " of ",
                  lifted_.size());
      // No scalar where the graph takes a tensor, no tensor where it takes an int, float, bool or
      // string: either would fail inside the interpreter (a saved plan edited by hand, or corrupt).
      const c10::TypeKind type =
          stage.graph->inputs()[stage.num_activation_inputs + j]->type()->kind();
      const bool scalar = lifted_[k].kind == LiftedKind::Scalar;
      const bool fits =
          scalar ? type != c10::TypeKind::TensorType
                 : type == c10::TypeKind::TensorType || type == c10::TypeKind::OptionalType;
      TORCH_CHECK(fits, "jitckpt: stage ", s + 1, " (", stage.label, ") reads lifted value ", k,
                  " (", lifted_[k].name, ", a ", toString(lifted_[k].kind),
                  ") where its graph takes an input of type ",
                  stage.graph->inputs()[stage.num_activation_inputs + j]->type()->str());
    }
    std::vector<bool> reads_value;
    for (size_t j = 0; j < stage.lifted.size(); ++j)
      reads_value.push_back(valueIsRead(stage.graph->inputs()[stage.num_activation_inputs + j]));
    reads_value_.push_back(std::move(reads_value));
    std::vector<size_t> cast;
    for (size_t j = 0; j < stage.lifted.size(); ++j) {
      if (lifted_[stage.lifted[j]].kind != LiftedKind::Parameter) continue;
      const auto& uses = stage.graph->inputs()[stage.num_activation_inputs + j]->uses();
      const bool casts = std::any_of(uses.begin(), uses.end(), [](const torch::jit::Use& use) {
        return castsForAutocast(use.user) ||
               (use.user->kind() == c10::prim::ListConstruct && listMayBeCast(use.user));
      });
      if (casts) cast.push_back(j);
      noteReads(stage.lifted[j], uses);
    }
    cast_lifted_.push_back(std::move(cast));
    random_.push_back(containsNode(stage.graph->block(), drawsRandomNumbers));
    recurrent_dropout_.push_back(containsNode(stage.graph->block(), dropsOutBetweenLayers));
    std::vector<bool> may_require_grad;
    for (size_t k : stage.lifted)
      may_require_grad.push_back(lifted_[k].kind == LiftedKind::Parameter ||
                                 lifted_[k].kind == LiftedKind::Side);
    autograd_kernels_.push_back(
        containsNode(stage.graph->block(), choosesKernelByAutograd) ||
        (kMatmulFoldsByRequiresGrad &&
         multipliesByAComputedWeight(*stage.graph, stage.num_activation_inputs, may_require_grad)));
    stages_.push_back(std::move(stage));
  }
  for (size_t k = 0; k < lifted_.size(); ++k)
    cast_wherever_read_.push_back(lifted_[k].kind == LiftedKind::Parameter &&
                                  !lifted_[k].read_after_chain && reading_stages[k] >= 2 &&
                                  only_cast[k]);
  sized_by_data_ = findStagesSizedByData(stages_, lifted_, &steered_by_data_);
  const auto& outputs = stages_.back().graph->outputs();
  for (size_t i = 0; i < outputs.size(); ++i)
    outputs_read_inside_.push_back(readInside(stages_, i));
  outputs_never_require_grad_ = findNeverRequiresGrad(stages_, lifted_, {}, true).outputs;
  codes_.resize(stages_.size());
}

std::shared_ptr<const ChainStages::InputFlags> ChainStages::inputsNeverRequireGrad(
    const std::vector<bool>& chain_inputs_require_grad,
    const std::vector<bool>& lifted_tensors_require_grad) const {
  std::vector<bool> key = chain_inputs_require_grad;
  key.insert(key.end(), lifted_tensors_require_grad.begin(), lifted_tensors_require_grad.end());
  std::lock_guard<std::mutex> lock(never_mutex_);
  auto& flags = inputs_never_[key];
  if (flags) return flags;
  std::vector<bool> chain_inputs_never;
  for (bool requires_grad : chain_inputs_require_grad) chain_inputs_never.push_back(!requires_grad);
  // A lifted tensor that a stage writes in place may take a gradient from what it writes.
  std::vector<bool> written(lifted_.size(), false);
  for (const auto& stage : stages_) {
    for (size_t k : stage.mutated_lifted) written.at(k) = true;
  }
  std::vector<bool> lifted_never(lifted_.size(), false);
  for (size_t k = 0; k < lifted_.size(); ++k) {
    lifted_never[k] = lifted_[k].kind != LiftedKind::Scalar && !written[k] &&
                      position(k) < lifted_tensors_require_grad.size() &&
                      !lifted_tensors_require_grad[position(k)];
  }
  auto table = std::make_shared<InputFlags>(
      findNeverRequiresGrad(stages_, lifted_, chain_inputs_never, false, lifted_never).inputs);
  flags = std::move(table);
  return flags;
}

torch::jit::Code& ChainStages::code(int l) const {
  std::lock_guard<std::mutex> lock(codes_mutex_);
  auto& code = codes_.at(l - 1);
  if (!code) {
    code = std::make_unique<torch::jit::Code>(stages_[l - 1].graph,
                                              "jitckpt_stage_" + std::to_string(l));
  }
  return *code;
}

void ChainStages::checkWrittenTensorsShareNoMemory(
    const std::vector<at::Tensor>& lifted_tensors) const {
  std::unordered_set<size_t> written;
  for (const auto& stage : stages_)
    written.insert(stage.mutated_lifted.begin(), stage.mutated_lifted.end());
  if (written.empty()) return;
  // storage -> the first lifted entry seen on it
  std::unordered_map<const c10::StorageImpl*, size_t> first;
  for (size_t k = 0; k < lifted_.size(); ++k) {
    if (lifted_[k].kind == LiftedKind::Scalar || position_[k] >= lifted_tensors.size()) continue;
    const at::Tensor& t = lifted_tensors[position_[k]];
    if (!t.defined() || !t.has_storage()) continue;
    const auto [it, inserted] = first.emplace(t.storage().unsafeGetStorageImpl(), k);
    if (inserted) continue;
    const size_t other = it->second;
    const at::Tensor& u = lifted_tensors[position_[other]];
    if (u.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) continue;  // one tensor, two names
    TORCH_CHECK(!written.count(k) && !written.count(other), "jitckpt: '", lifted_[other].name,
                "' and '", lifted_[k].name,
                "' share memory (one is a view of the other) and the checkpointed layers write ",
                written.count(k) ? lifted_[k].name : lifted_[other].name,
                " in place: a recomputation would read the other as the call began, and the "
                "gradients would be wrong. Register them as separate tensors (clone one), or keep "
                "the layers that write them out of the checkpointed forward");
  }
}

}  // namespace jitckpt
