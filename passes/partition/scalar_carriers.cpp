// Step 5 of the partition pass: flags and numbers that forward computes in the chain and reads
// layers later, carried across cuts as 0-dim CPU tensors. (A floating carrier gets a gradient edge
// as a stage input, like any floating activation; its read-back is not differentiable, so nothing
// flows there. An Optional[Tensor] is not carried: where it holds a mask that does not require
// grad, the edge would make it require grad, and attention would pick another kernel.)
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "passes/partition/steps.h"

namespace jitckpt::partition_steps {
namespace {

namespace aten = c10::aten;
namespace prim = c10::prim;

// How a value crosses cuts.
enum class CarriedAs {
  None,         // it does not: tensors, optionals, lists, strings, objects
  TypedScalar,  // bool, int, float: a 0-dim tensor of a dtype exact for every value
  Number,       // Scalar (what .item() returns): a 0-dim tensor of the value's own dtype
};

CarriedAs carriedAs(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::BoolType:
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
      return CarriedAs::TypedScalar;
    case c10::TypeKind::NumberType:
      return CarriedAs::Number;
    default:
      return CarriedAs::None;
  }
}

// Constants at the graph's front, where the partition expects every constant (hoist.cpp).
class FrontConstants {
 public:
  explicit FrontConstants(Graph& graph) : graph_(graph) {}
  Value* get(const c10::IValue& value) {
    torch::jit::WithInsertPoint front(graph_.block()->nodes().front());
    return graph_.insertConstant(value);
  }

 private:
  Graph& graph_;
};

// aten::tensor(v, dtype, device=None, requires_grad=False): exact for bool (kBool), int (kLong) and
// float (TorchScript's float is a double: kDouble).
Node* typedCarrier(Graph& graph, FrontConstants& constants, Value* v) {
  const auto kind = v->type()->kind();
  const c10::ScalarType dtype = kind == c10::TypeKind::BoolType  ? c10::kBool
                                : kind == c10::TypeKind::IntType ? c10::kLong
                                                                 : c10::kDouble;
  Node* make = graph.create(aten::tensor, {v, constants.get(static_cast<int64_t>(dtype)),
                                           constants.get(c10::IValue()), constants.get(false)});
  make->output()->setType(c10::TensorType::get());
  return make;
}

Node* typedReadBack(Graph& graph, Value* carrier, const c10::TypePtr& type) {
  const auto kind = type->kind();
  Node* read = graph.create(kind == c10::TypeKind::BoolType  ? aten::Bool
                            : kind == c10::TypeKind::IntType ? aten::Int
                                                             : aten::Float,
                            {carrier});
  read->output()->setType(type);
  return read;
}

// What crosses the cuts for one value, made right after its definition, and how each reader gets
// the value back from them.
class Carrier {
 public:
  Carrier(Graph& graph, FrontConstants& constants, Value* v, CarriedAs how)
      : graph_(graph), v_(v), how_(how) {
    Node* at = v->node();
    if (how == CarriedAs::TypedScalar) {
      carrier_ = insertAfter(at, typedCarrier(graph, constants, v))->output();
    } else {
      carrier_ = insertAfter(at, graph.create(prim::NumToTensor, {v}))->output();
      carrier_->setType(c10::TensorType::get());
    }
    nameAfter(v, carrier_, "_carried");
  }

  Value* tensor() const { return carrier_; }

  // The value as `reader` reads it, made right before it.
  Value* readBackBefore(Node* reader) {
    if (how_ == CarriedAs::TypedScalar)
      return insertBefore(reader, typedReadBack(graph_, carrier_, v_->type()))->output();
    Node* item = insertBefore(reader, graph_.create(aten::item, {carrier_}));
    item->output()->setType(v_->type());
    return item->output();
  }

 private:
  // wide.1 -> wide_carried, so that the partition's text says what a carrier holds.
  static void nameAfter(const Value* v, Value* carrier, const std::string& suffix) {
    if (!v->hasDebugName()) return;
    const std::string name = v->debugName();
    const size_t dot = name.find_last_of('.');
    const bool numbered = dot != std::string::npos && dot + 1 < name.size() &&
                          name.find_first_not_of("0123456789", dot + 1) == std::string::npos;
    carrier->setDebugName((numbered ? name.substr(0, dot) : name) + suffix);
  }
  static Node* insertAfter(Node* at, Node* n) {
    n->insertAfter(at);
    return n;
  }
  static Node* insertBefore(Node* at, Node* n) {
    n->insertBefore(at);
    return n;
  }

  Graph& graph_;
  Value* v_;
  CarriedAs how_;
  Value* carrier_ = nullptr;
};

}  // namespace

std::unordered_set<const Value*> carryScalarsAsTensors(Graph& graph, size_t num_side_nodes) {
  const std::vector<Node*> nodes = nodesAfterHoistedPrefix(graph);
  std::unordered_map<const Node*, size_t> index;
  std::vector<int> heavy_before(nodes.size() + 1, 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    index[nodes[i]] = i;
    heavy_before[i + 1] = heavy_before[i] + (isHeavyOp(nodes[i]) ? 1 : 0);
  }
  index[graph.block()->return_node()] = nodes.size();

  FrontConstants constants(graph);
  std::unordered_set<const Value*> flags;
  for (size_t p = num_side_nodes; p < nodes.size(); ++p) {
    for (Value* v : nodes[p]->outputs()) {
      const CarriedAs how = carriedAs(v->type());
      if (how == CarriedAs::None || v->uses().empty()) continue;
      // Each top-level node that reads v, by position: v is read back right before it.
      std::map<size_t, Node*> readers;
      for (const auto& use : v->uses()) {
        Node* owner = topLevelOwner(use.user, graph.block());
        readers.emplace(index.at(owner), owner);
      }
      // Only a value live across a heavy op keeps layers together; others stay as they are.
      if (heavy_before[readers.rbegin()->first] == heavy_before[p + 1]) continue;
      Carrier carrier(graph, constants, v, how);
      for (const auto& [position, reader] : readers) {
        Value* read = carrier.readBackBefore(reader);
        const auto uses = v->uses();  // copied: replaceInput edits the list
        for (const auto& use : uses) {
          if (use.user != read->node() && topLevelOwner(use.user, graph.block()) == reader)
            use.user->replaceInput(use.offset, read);
        }
      }
      flags.insert(carrier.tensor());
    }
  }
  return flags;
}

}  // namespace jitckpt::partition_steps
