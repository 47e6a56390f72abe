// Twin stages (see twin_stages.h).
#include "planner/twin_stages.h"

#include <algorithm>
#include <ios>
#include <sstream>
#include <unordered_map>

namespace jitckpt {
namespace {

using torch::jit::AttributeKind;

void writeDouble(std::ostream& out, double v) { out << std::hexfloat << v << std::defaultfloat; }

// Values whose text says exactly what they are; false for any other kind.
bool writeValue(std::ostream& out, const c10::IValue& v) {
  if (v.isNone()) {
    out << "None";
  } else if (v.isBool()) {
    out << (v.toBool() ? "True" : "False");
  } else if (v.isInt()) {
    out << v.toInt();
  } else if (v.isDouble()) {
    writeDouble(out, v.toDouble());
  } else if (v.isString()) {
    out << '"' << v.toStringRef() << '"';
  } else if (v.isDevice()) {
    out << v.toDevice();
  } else if (v.isTensor()) {
    out << "tensor@" << v.toTensor().unsafeGetTensorImpl();  // alike only where the same one
  } else if (v.isList() || v.isTuple()) {
    out << (v.isList() ? '[' : '(');
    for (const auto& e : v.isList() ? v.toListRef() : v.toTupleRef().elements()) {
      if (!writeValue(out, e)) return false;
      out << ',';
    }
    out << (v.isList() ? ']' : ')');
  } else {
    return false;
  }
  return true;
}

bool writeAttribute(std::ostream& out, const torch::jit::Node& node, torch::jit::Symbol name) {
  out << ' ' << name.toUnqualString() << '=';
  switch (node.kindOf(name)) {
    case AttributeKind::i:
      out << node.i(name);
      return true;
    case AttributeKind::is:
      for (int64_t v : node.is(name)) out << v << ',';
      return true;
    case AttributeKind::f:
      writeDouble(out, node.f(name));
      return true;
    case AttributeKind::fs:
      for (double v : node.fs(name)) writeDouble(out << ',', v);
      return true;
    case AttributeKind::s:
      out << '"' << node.s(name) << '"';
      return true;
    case AttributeKind::ss:
      for (const auto& v : node.ss(name)) out << '"' << v << "\",";
      return true;
    case AttributeKind::t:
      out << "tensor@" << node.t(name).unsafeGetTensorImpl();
      return true;
    case AttributeKind::ty:
      out << node.ty(name)->repr_str();
      return true;
    case AttributeKind::ival:
      return writeValue(out, node.ival(name));
    default:  // complex numbers, graphs, lists of tensors or types: not compared
      return false;
  }
}

// The graph op for op, each value named by its place in order of definition.
class GraphText {
 public:
  bool write(const torch::jit::Block& block) {
    for (const torch::jit::Value* v : block.inputs()) define(v);
    for (const torch::jit::Node* node : block.nodes()) {
      out_ << '\n' << node->kind().toQualString();
      for (torch::jit::Symbol name : node->attributeNames())
        if (!writeAttribute(out_, *node, name)) return false;
      out_ << '(';
      for (const torch::jit::Value* v : node->inputs()) out_ << ids_.at(v) << ',';
      out_ << ')';
      for (const torch::jit::Value* v : node->outputs()) define(v);
      for (const torch::jit::Block* inner : node->blocks()) {
        out_ << '{';
        if (!write(*inner)) return false;
        out_ << '}';
      }
    }
    out_ << "\nreturn";
    for (const torch::jit::Value* v : block.outputs()) out_ << ' ' << ids_.at(v);
    return true;
  }
  std::string str() const { return out_.str(); }

 private:
  void define(const torch::jit::Value* v) {
    const size_t id = ids_.size();
    ids_.emplace(v, id);
    out_ << ' ' << id << ':' << v->type()->repr_str();
  }
  std::ostringstream out_;
  std::unordered_map<const torch::jit::Value*, size_t> ids_;
};

// What the stage reads, tensor by tensor: each one's metadata and the first earlier one whose
// storage it shares.
class ReadValues {
 public:
  explicit ReadValues(std::ostream& out) : out_(out) {}
  void tensor(const at::Tensor& t) {
    out_ << "\n  ";
    if (!t.defined()) {
      out_ << "undefined";
      return;
    }
    out_ << t.scalar_type() << ' ' << t.device() << ' ' << t.layout() << ' ' << t.sizes() << ' '
         << (t.layout() == c10::kStrided ? t.strides() : c10::IntArrayRef{}) << " grad "
         << t.requires_grad() << " conj " << t.is_conj() << " neg " << t.is_neg();
    if (!t.has_storage()) return;
    const auto* storage = t.storage().unsafeGetStorageImpl();
    const auto [seen, added] = storages_.emplace(storage, storages_.size());
    out_ << " offset " << t.storage_offset() << " storage " << t.storage().nbytes() << " shares "
         << (added ? -1 : static_cast<int64_t>(seen->second));
  }

 private:
  std::ostream& out_;
  std::unordered_map<const c10::StorageImpl*, size_t> storages_;
};

}  // namespace

std::optional<std::string> twinKey(const StageRunner& runner, int l, const Tensors& activations) {
  const ChainStages& stages = runner.stages();
  const auto& by_data = stages.stagesSizedByData();
  if (std::find(by_data.begin(), by_data.end(), l) != by_data.end()) return std::nullopt;
  const StageSpec& stage = stages.stage(l);
  GraphText graph;
  if (!graph.write(*stage.graph->block())) return std::nullopt;
  std::ostringstream key;
  key << graph.str() << "\nwrites input " << stage.writes_activation_input << " random "
      << stages.hasRandomOps(l) << " autograd kernels " << stages.hasAutogradDependentKernels(l);
  ReadValues reads(key);
  for (size_t i = 0; i < activations.size(); ++i) {
    reads.tensor(activations[i]);
    key << " never grad " << runner.inputNeverRequiresGrad(l, i);
  }
  const ChainArguments& arguments = runner.arguments();
  std::unordered_map<size_t, size_t> first_use;  // firstPosition -> entry j that read it first
  for (size_t j = 0; j < stage.lifted.size(); ++j) {
    const size_t k = stage.lifted[j];
    const LiftedKind kind = stages.lifted()[k].kind;
    key << "\nlifted " << toString(kind) << " reads " << stages.readsValue(l, j) << " written "
        << (std::count(stage.mutated_lifted.begin(), stage.mutated_lifted.end(), k) > 0);
    if (kind == LiftedKind::Scalar) {
      const c10::IValue& v = arguments.lifted_scalars.at(stages.position(k));
      if (v.isTensor()) {
        reads.tensor(v.toTensor());
      } else {
        key << ' ';
        if (!writeValue(key, v)) return std::nullopt;
      }
      continue;
    }
    const size_t position = stages.position(k);
    reads.tensor(arguments.lifted_tensors.at(position));
    key << " same as " << first_use.emplace(runner.firstPosition(position), j).first->second;
  }
  return key.str();
}

StageProfile twinProfile(const StageRunner& runner, int measured_stage,
                         const StageProfile& measured, int l) {
  const ChainStages& stages = runner.stages();
  const StageSpec& from = stages.stage(measured_stage);
  const StageSpec& to = stages.stage(l);
  TORCH_INTERNAL_ASSERT(from.lifted.size() == to.lifted.size(), "twin stages ", measured_stage,
                        " and ", l, " read different numbers of lifted values");
  auto firstPosition = [&](const StageSpec& stage, size_t j) -> std::optional<size_t> {
    const size_t k = stage.lifted[j];
    if (stages.lifted()[k].kind == LiftedKind::Scalar) return std::nullopt;
    return runner.firstPosition(stages.position(k));
  };
  StageProfile twin = measured;
  twin.label = to.label;
  for (auto& [position, bytes] : twin.lifted_gradients) {
    size_t j = 0;
    while (j < from.lifted.size() && firstPosition(from, j) != position) ++j;
    TORCH_INTERNAL_ASSERT(j < from.lifted.size(), "stage ", measured_stage,
                          " returned a gradient for a tensor it does not read");
    position = *firstPosition(to, j);
  }
  return twin;
}

}  // namespace jitckpt
