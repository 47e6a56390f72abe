// Step 3 of the partition pass: tensor lists built where forward starts, moved to their first use.
#include "passes/partition/steps.h"

namespace jitckpt::partition_steps {

// A ListConstruct only reads its inputs, which stay defined before the node it moves to.
size_t sinkTensorLists(Graph& graph) {
  size_t moved = 0;
  std::vector<Node*> constructs;
  for (Node* n : graph.nodes()) {
    const auto type = n->kind() == c10::prim::ListConstruct
                          ? n->output()->type()->cast<c10::ListType>()
                          : nullptr;
    if (type && type->getElementType()->kind() == c10::TypeKind::TensorType)
      constructs.push_back(n);
  }
  for (Node* construct : constructs) {
    Node* first_user = nullptr;
    for (const auto& use : construct->output()->uses()) {
      Node* user = use.user;
      while (user->owningBlock() != graph.block()) user = user->owningBlock()->owningNode();
      if (!first_user || user->isBefore(first_user)) first_user = user;
    }
    if (first_user && first_user != construct->next()) {
      construct->moveBefore(first_user);
      ++moved;
    }
  }
  return moved;
}

}  // namespace jitckpt::partition_steps
