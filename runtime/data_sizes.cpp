// Tensors sized by data (see data_sizes.h).
#include "runtime/data_sizes.h"

#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <string>
#include <unordered_set>

#include "runtime/value_judgement.h"

namespace jitckpt {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// Whether `v` holds the same values at every call: made of constants, parameters, buffers and
// flags alone (a relative position index that a buffer holds), not of the data.
class ModelState : public ValueJudgement {
 public:
  ModelState(const StageSpec& stage, const std::vector<LiftedSpec>& lifted)
      : ValueJudgement(false), stage_(stage), lifted_(lifted) {}

  bool holds(const Value* v) { return of(v); }

 private:
  bool judge(const Value* v) override {
    const Node* n = v->node();
    if (n->kind() == c10::prim::Param) {
      // a loop's carried value (its block's parameter) is not the model's state
      if (n != stage_.graph->param_node() || v->offset() < stage_.num_activation_inputs)
        return false;
      const LiftedSpec& spec =
          lifted_.at(stage_.lifted.at(v->offset() - stage_.num_activation_inputs));
      return spec.kind != LiftedKind::Side && !spec.beyond_shapes;
    }
    if (n->kind() == c10::prim::Constant) return true;
    if (!n->blocks().empty()) return false;
    for (const Value* input : n->inputs()) {
      if (!holds(input)) return false;
    }
    return true;
  }

  const StageSpec& stage_;
  const std::vector<LiftedSpec>& lifted_;
};

// The partition's scalar carriers: 0-dim tensors made from a number in the stage that computed it.
const std::unordered_set<std::string>& carrierKinds() {
  static const std::unordered_set<std::string> kinds = {"aten::tensor", "prim::NumToTensor",
                                                        "aten::scalar_tensor"};
  return kinds;
}

// Which of a stage's graph inputs hold a number made from sizes or the model's state, where the
// stage reads them as a number: a lifted parameter or buffer (a BatchNorm's count), and an
// activation that carries a number an earlier stage made while sized by shapes alone; not the
// chain's inputs, nor a side tensor the model computed from them before the chain.
class NumberInputs {
 public:
  NumberInputs(const StageSpec& stage, const std::vector<LiftedSpec>& lifted,
               const std::vector<bool>& carried)
      : stage_(stage), lifted_(lifted), carried_(carried) {}

  // `input`: a prim::Param's output
  bool madeFromSizes(const Value* input) const {
    if (input->node() != stage_.graph->param_node()) return false;  // a loop's carried value
    const size_t i = input->offset();
    if (i < stage_.num_activation_inputs) return i < carried_.size() && carried_[i];
    const LiftedSpec& spec = lifted_.at(stage_.lifted.at(i - stage_.num_activation_inputs));
    return spec.kind != LiftedKind::Side && !spec.beyond_shapes;
  }

 private:
  const StageSpec& stage_;
  const std::vector<LiftedSpec>& lifted_;
  const std::vector<bool>& carried_;
};

const std::unordered_set<std::string>& alwaysSizedByData() {
  static const std::unordered_set<std::string> kinds = {
      "aten::nonzero",       "aten::nonzero_numpy", "aten::argwhere",
      "aten::masked_select", "aten::unique",        "aten::_unique",
      "aten::_unique2",      "aten::unique_dim",    "aten::unique_consecutive",
      "aten::bincount"};
  return kinds;
}

bool holdsTensor(const Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; }

// An int, a float or a list or optional of them: what a size or a scale can be made of.
bool holdsNumber(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::NumberType:
      return true;
    case c10::TypeKind::ListType:
    case c10::TypeKind::OptionalType:
      return holdsNumber(type->containedTypes().at(0));
    default:
      return false;
  }
}

// Whether the stage reads a number of the call that its input key does not hold (an int argument
// of forward), which may set a size (h[:n], a scale factor) without any tensor read.
bool readsCallNumber(const StageSpec& stage, const std::vector<LiftedSpec>& lifted) {
  for (size_t j = 0; j < stage.lifted.size(); ++j) {
    const Value* input = stage.graph->inputs().at(stage.num_activation_inputs + j);
    if (lifted.at(stage.lifted[j]).beyond_shapes && holdsNumber(input->type()) &&
        !input->uses().empty())
      return true;
  }
  return false;
}

// A Python function TorchScript calls as it is (@torch.jit.ignore): it may compute its result from
// the values of the tensors it takes.
bool opaqueOnData(const Node* n, ModelState& state) {
  if (n->kind() != c10::prim::PythonOp) return false;
  const auto inputs = n->inputs();
  return std::any_of(inputs.begin(), inputs.end(), [&](const Value* v) { return !state.holds(v); });
}

// Whether a tensor read on the host holds the data's values: not a number made from sizes that
// the stage takes, nor the model's state.
bool readsData(const Value* read, ModelState& state, const NumberInputs& number_inputs) {
  if (read->node()->kind() == c10::prim::Param && number_inputs.madeFromSizes(read)) return false;
  return !state.holds(read);
}

// Whether a flag (or a number) comes from the data's values: read from a tensor the data made
// (bool(x.any()), torch.equal), or computed from such flags and numbers. A branch on it may make
// tensors of other sizes than the branch the profile took (n = 8 if bool(m.all()) else 64; h[:n]),
// and a loop on it runs as many times as the data says.
class DataFlags : public ValueJudgement {
 public:
  DataFlags(ModelState& state, const NumberInputs& number_inputs)
      : ValueJudgement(false), state_(state), number_inputs_(number_inputs) {}

  bool fromData(const Value* v) { return of(v); }
  // Whether the data sets how many times loop `n` runs: its trip count, or its condition.
  bool loopFromData(const Node* n) {
    return fromData(n->input(0)) || fromData(n->input(1)) ||
           fromData(n->blocks().at(0)->outputs().at(0));
  }

 private:
  bool judge(const Value* v) override {
    const Node* n = v->node();
    const std::string kind = n->kind().toQualString();
    if (const Value* read = tensorReadIntoNumber(n)) return readsData(read, state_, number_inputs_);
    if (opaqueOnData(n, state_)) return true;
    if (kind == "aten::equal" || kind == "aten::allclose") {
      return readsData(n->input(0), state_, number_inputs_) ||
             readsData(n->input(1), state_, number_inputs_);
    }
    if (n->kind() == c10::prim::Param || n->kind() == c10::prim::Constant) return false;
    const size_t i = v->offset();
    if (n->kind() == c10::prim::If) {  // the branch taken, or what it yields
      return fromData(n->input(0)) || fromData(n->blocks().at(0)->outputs().at(i)) ||
             fromData(n->blocks().at(1)->outputs().at(i));
    }
    if (n->kind() == c10::prim::Loop) {  // how often it runs, what it starts from or yields
      return loopFromData(n) || fromData(n->input(2 + i)) ||
             fromData(n->blocks().at(0)->outputs().at(1 + i));
    }
    if (!n->blocks().empty()) return false;
    for (const Value* input : n->inputs()) {
      if (!holdsTensor(input) && fromData(input)) return true;
    }
    return false;
  }

  ModelState& state_;
  const NumberInputs& number_inputs_;
};

// A branch on the data that hands on what it made, or a loop that runs as often as the data says.
bool steeredByData(const Node* n, DataFlags& flags) {
  if (n->kind() == c10::prim::If) {
    const auto& outputs = n->outputs();
    return std::any_of(outputs.begin(), outputs.end(),
                       [](const Value* v) { return v->hasUses(); }) &&
           flags.fromData(n->input(0));
  }
  return n->kind() == c10::prim::Loop && flags.loopFromData(n);
}

bool sizedByData(const Node* n, ModelState& state, const NumberInputs& number_inputs) {
  const std::string kind = n->kind().toQualString();
  if (alwaysSizedByData().count(kind)) return true;
  // what it returns may be a size, or a tensor that its values sized
  if (opaqueOnData(n, state)) return !n->outputs().empty();
  if (const Value* read = tensorReadIntoNumber(n)) {
    // a flag picks a branch or ends a loop: judged there (steeredByData)
    if (kind == "aten::Bool" || kind == "aten::is_nonzero") return false;
    return read->node()->kind() != c10::prim::Param || !number_inputs.madeFromSizes(read);
  }
  // x[mask] keeps as many rows as the mask has true entries; an index of integers gives its own
  // shape, which the graph does not tell apart from a mask, unless it holds the model's state.
  if (kind == "aten::index") {
    const Value* indices = n->inputs().size() > 1 ? n->input(1) : nullptr;
    if (!indices || indices->node()->kind() != c10::prim::ListConstruct) return true;
    for (const Value* index : indices->node()->inputs()) {
      if (index->type()->kind() != c10::TypeKind::NoneType && !state.holds(index)) return true;
    }
    return false;
  }
  // one_hot's classes counted from the values; tensor_split at a tensor of indices
  // (a number of classes the stage takes is judged where it was made)
  if (kind == "aten::one_hot") {
    if (n->inputs().size() < 2) return true;
    const auto classes = torch::jit::toIValue(n->input(1));
    return classes && classes->isInt() && classes->toInt() < 0;
  }
  if (kind == "aten::tensor_split") return n->inputs().size() > 1 && holdsTensor(n->input(1));
  // where(condition) alone is nonzero; repeat_interleave with a tensor of repeats
  if (kind == "aten::where") return n->inputs().size() == 1;
  if (kind == "aten::repeat_interleave")
    return n->inputs().size() == 1 || (n->inputs().size() >= 2 && holdsTensor(n->input(1)));
  return false;
}

bool anySizedByData(const torch::jit::Block* block, ModelState& state,
                    const NumberInputs& number_inputs) {
  for (const Node* n : block->nodes()) {
    if (sizedByData(n, state, number_inputs)) return true;
    for (const auto* b : n->blocks()) {
      if (anySizedByData(b, state, number_inputs)) return true;
    }
  }
  return false;
}

bool anySteeredByData(const torch::jit::Block* block, DataFlags& flags) {
  for (const Node* n : block->nodes()) {
    if (steeredByData(n, flags)) return true;
    for (const auto* b : n->blocks()) {
      if (anySteeredByData(b, flags)) return true;
    }
  }
  return false;
}

}  // namespace

const Value* tensorReadIntoNumber(const Node* n) {
  static const std::unordered_set<std::string> kinds = {"aten::item",
                                                        "aten::_local_scalar_dense",
                                                        "aten::Int",
                                                        "aten::Float",
                                                        "aten::Bool",
                                                        "aten::is_nonzero",
                                                        "aten::IntImplicit",
                                                        "aten::FloatImplicit",
                                                        "aten::ScalarImplicit",
                                                        "aten::tolist",
                                                        "prim::tolist"};
  if (!kinds.count(n->kind().toQualString()) || n->inputs().empty()) return nullptr;
  const Value* read = n->input(0);
  if (!holdsTensor(read) || carrierKinds().count(read->node()->kind().toQualString()))
    return nullptr;
  return read;
}

bool readsShapeOnly(const Node* n) {
  static const std::unordered_set<std::string> kinds = {"aten::size", "aten::dim", "aten::numel",
                                                        "aten::sym_size", "aten::sym_numel"};
  return kinds.count(n->kind().toQualString()) > 0;
}

std::vector<int> findStagesSizedByData(const std::vector<StageSpec>& stages,
                                       const std::vector<LiftedSpec>& lifted,
                                       std::vector<int>* steered) {
  std::vector<int> found;
  std::vector<bool> carried;  // of the stage's activation inputs; the first stage's are the data
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageSpec& stage = stages[s];
    ModelState state(stage, lifted);
    const NumberInputs number_inputs(stage, lifted, carried);
    DataFlags flags(state, number_inputs);
    const bool steers = anySteeredByData(stage.graph->block(), flags);
    const bool by_data = steers || readsCallNumber(stage, lifted) ||
                         anySizedByData(stage.graph->block(), state, number_inputs);
    if (by_data) found.push_back(static_cast<int>(s) + 1);
    if (steers && steered) steered->push_back(static_cast<int>(s) + 1);
    // What this stage hands on: its own carriers where its numbers come from sizes alone (a flag
    // of the data is not: a later stage may branch on it), and the carriers it passes through.
    std::vector<bool> next;
    for (const Value* out : stage.graph->outputs()) {
      const Node* made = out->node();
      const size_t i = out->offset();
      if (made->kind() == c10::prim::Param)
        next.push_back(i < stage.num_activation_inputs && i < carried.size() && carried[i]);
      else
        next.push_back(!by_data && carrierKinds().count(made->kind().toQualString()) > 0 &&
                       !flags.fromData(made->input(0)));
    }
    carried = std::move(next);
  }
  return found;
}

}  // namespace jitckpt
