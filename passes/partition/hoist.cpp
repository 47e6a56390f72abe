// Step 1 of the partition pass: hoisting GetAttr chains and constants; attribute helpers.
#include <string>
#include <unordered_set>
#include <vector>

#include "passes/graph_walk.h"
#include "passes/partition/steps.h"

namespace jitckpt::partition_steps {
namespace {

namespace prim = c10::prim;

bool isTensorOrOptionalTensor(const Value* v) {
  if (isTensor(v)) return true;
  const auto optional = v->type()->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::TensorType;
}

void checkInlined(Graph& graph) {
  TORCH_CHECK(!graph.inputs().empty(), "partition: the graph has no inputs; expected `self` first");
  for (const Node* n : graph.block()->nodes()) {
    TORCH_CHECK(n->kind() != prim::CallMethod && n->kind() != prim::CallFunction,
                "partition: the graph is not inlined (found ", n->kind().toQualString(),
                "); run torch::jit::Inline first, or use partitionModule");
  }
}

// A `with` block (torch.no_grad() in forward) is an object's prim::Enter ... prim::Exit: the
// object is assigned attributes, and a cut inside the block would run its two halves apart.
void checkNoWithBlocks(Graph& graph) {
  for (Node* n : graph.block()->nodes()) {
    forEachNestedNode(n, [&](Node* cur) {
      if (cur->kind() != prim::Enter) return;
      // The `with` line where the inlined graph kept it, else the line that made the object.
      auto location = cur->sourceRange().file_line_col();
      if (!location) location = cur->input(0)->node()->sourceRange().file_line_col();
      std::string where;
      if (location)
        where = " at " + std::get<0>(*location) + ":" + std::to_string(std::get<1>(*location));
      TORCH_CHECK(false, "partition: forward runs a `with` block (",
                  cur->input(0)->type()->annotation_str(), ")", where,
                  "; jitckpt cannot cut forward around one. For torch.no_grad(), compute the "
                  "value as it is and .detach() it, or compute it before calling the module");
    });
  }
}

// GetAttr chains from `self` (in any block) and top-level constants, in dependency order.
std::vector<Node*> movableNodes(Graph& graph) {
  std::vector<Node*> movable;
  std::unordered_set<const Value*> attribute_values;
  for (Node* n : graph.block()->nodes()) {
    forEachNestedNode(n, [&](Node* cur) {
      if (cur->kind() == prim::SetAttr) {
        TORCH_CHECK(false, "partition: forward assigns attribute '", cur->s(c10::attr::name),
                    "' (prim::SetAttr); jitckpt cannot lift attributes that forward changes. "
                    "Move the assignment out of forward");
      }
      const bool from_self =
          cur->kind() == prim::GetAttr &&
          (cur->input(0) == graph.inputs()[0] || attribute_values.count(cur->input(0)));
      if (from_self) attribute_values.insert(cur->output());
      if (from_self || (cur->kind() == prim::Constant && cur->owningBlock() == graph.block())) {
        movable.push_back(cur);
      }
    });
  }
  return movable;
}

}  // namespace

void hoistAttributesAndConstants(Graph& graph) {
  checkInlined(graph);
  checkNoWithBlocks(graph);
  Node* insert_after = graph.param_node();
  for (Node* n : movableNodes(graph)) {
    // GetAttr inputs are `self` or earlier GetAttrs, already moved: order is preserved.
    n->moveAfter(insert_after);
    insert_after = n;
  }
}

std::string attributePath(const Value* v) {
  std::vector<std::string> names;
  const Node* n = v->node();
  while (n->kind() == prim::GetAttr) {
    names.push_back(n->s(c10::attr::name));
    n = n->input(0)->node();
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) path += (path.empty() ? "" : ".") + *it;
  return path;
}

LiftedKind attributeKind(const Value* v) {
  if (!isTensorOrOptionalTensor(v)) return LiftedKind::Scalar;
  const Node* n = v->node();
  const auto cls = n->input(0)->type()->cast<c10::ClassType>();
  if (cls) {
    const auto slot = cls->findAttributeSlot(n->s(c10::attr::name));
    if (slot && cls->is_parameter(*slot)) return LiftedKind::Parameter;
    if (slot && !isTensor(v) && !cls->is_buffer(*slot)) return LiftedKind::Scalar;
  }
  return LiftedKind::Buffer;
}

}  // namespace jitckpt::partition_steps
