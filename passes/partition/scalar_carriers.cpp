// Step 1d of the partition pass: flags and numbers that forward computes in the chain and reads
// layers later, carried across cuts as 0-dim CPU tensors.
#include <map>
#include <optional>
#include <unordered_map>

#include "passes/partition/steps.h"

namespace jitckpt::partition_steps {
namespace {

namespace aten = c10::aten;
namespace prim = c10::prim;

// The carrier's dtype, exact for every value of the type (TorchScript's float is a double).
std::optional<c10::ScalarType> carrierDtype(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::BoolType:
      return c10::kBool;
    case c10::TypeKind::IntType:
      return c10::kLong;
    case c10::TypeKind::FloatType:
      return c10::kDouble;
    default:
      return std::nullopt;
  }
}

c10::Symbol readBack(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::BoolType:
      return aten::Bool;
    case c10::TypeKind::IntType:
      return aten::Int;
    default:
      return aten::Float;
  }
}

// A constant at the graph's front, where the partition expects every constant (hoist.cpp).
Value* frontConstant(Graph& graph, const c10::IValue& value) {
  torch::jit::WithInsertPoint front(graph.block()->nodes().front());
  return graph.insertConstant(value);
}

// aten::tensor(v, dtype, device=None, requires_grad=False) right after v's node.
Value* carrierOf(Graph& graph, Value* v, c10::ScalarType dtype) {
  Value* dtype_value = frontConstant(graph, static_cast<int64_t>(dtype));
  Value* none = frontConstant(graph, c10::IValue());
  Value* no_grad = frontConstant(graph, false);
  Node* make = graph.create(aten::tensor, {v, dtype_value, none, no_grad});
  make->output()->setType(c10::TensorType::get());
  make->insertAfter(v->node());
  return make->output();
}

}  // namespace

size_t carryScalarsAsTensors(Graph& graph, size_t num_side_nodes) {
  std::vector<Node*> nodes;
  bool in_prefix = true;  // the hoisted GetAttr/Constant prefix, as listTopLevel skips it
  for (Node* n : graph.block()->nodes()) {
    if (in_prefix && (n->kind() == prim::GetAttr || n->kind() == prim::Constant)) continue;
    in_prefix = false;
    nodes.push_back(n);
  }
  std::unordered_map<const Node*, size_t> index;
  std::vector<int> heavy_before(nodes.size() + 1, 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    index[nodes[i]] = i;
    heavy_before[i + 1] = heavy_before[i] + (isHeavyOp(nodes[i]) ? 1 : 0);
  }
  index[graph.block()->return_node()] = nodes.size();

  size_t carried = 0;
  for (size_t p = num_side_nodes; p < nodes.size(); ++p) {
    for (Value* v : nodes[p]->outputs()) {
      const auto dtype = carrierDtype(v->type());
      if (!dtype || v->uses().empty()) continue;
      // Each top-level node that reads v, by position: v is read back right before it.
      std::map<size_t, Node*> readers;
      for (const auto& use : v->uses()) {
        Node* owner = topLevelOwner(use.user, graph.block());
        readers.emplace(index.at(owner), owner);
      }
      // Only a value live across a heavy op keeps layers together; others stay as they are.
      if (heavy_before[readers.rbegin()->first] == heavy_before[p + 1]) continue;
      Value* carrier = carrierOf(graph, v, *dtype);
      for (const auto& [position, reader] : readers) {
        Node* read = graph.create(readBack(v->type()), {carrier});
        read->output()->setType(v->type());
        read->insertBefore(reader);
        const auto uses = v->uses();  // copied: replaceInput edits the list
        for (const auto& use : uses) {
          if (topLevelOwner(use.user, graph.block()) == reader)
            use.user->replaceInput(use.offset, read->output());
        }
      }
      ++carried;
    }
  }
  return carried;
}

}  // namespace jitckpt::partition_steps
