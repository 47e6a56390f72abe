// Rewrite pass (see rewrite.h).
#include "passes/rewrite.h"

#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <algorithm>

#include "passes/strip.h"
#include "runtime/forward_start.h"

namespace jitckpt {

namespace {

using torch::jit::Node;
using torch::jit::Value;

// Inserts the jitckpt::chain call before the region; returns the ListUnpack of its outputs.
Node* insertChainCall(const Partition& partition, const ChainStages& stages) {
  auto& graph = *partition.graph;
  torch::jit::WithInsertPoint guard(partition.first_node);
  Value* inputs =
      graph.insertNode(graph.createList(c10::TensorType::get(), partition.chain_inputs))->output();
  std::vector<Value*> tensors, scalars;
  for (size_t k = 0; k < partition.lifted.size(); ++k) {
    const LiftedInput& l = partition.lifted[k];
    TORCH_INTERNAL_ASSERT(l.kind == stages.lifted()[k].kind, "rewriteChain: lifted value '", l.name,
                          "' has another kind in the plan");
    if (l.kind == LiftedKind::Scalar) {
      scalars.push_back(l.value);
    } else if (l.value->type()->kind() == c10::TypeKind::TensorType) {
      tensors.push_back(l.value);
    } else {  // Optional[Tensor] attribute holding a tensor (checked by the prologue at plan time)
      tensors.push_back(graph.insertUncheckedCast(l.value, c10::TensorType::get()));
    }
  }
  Value* lifted_tensors =
      graph.insertNode(graph.createList(c10::TensorType::get(), tensors))->output();
  Value* lifted_scalars =
      graph.insertNode(graph.createList(c10::AnyType::get(), scalars))->output();
  Value* plan_value = graph.insertGetAttr(graph.inputs()[0], kPlanAttribute);
  plan_value->setType(planType());
  Node* call = graph.create(c10::Symbol::fromQualString("jitckpt::chain"),
                            {inputs, lifted_tensors, lifted_scalars, plan_value}, 1);
  call->output()->setType(c10::ListType::ofTensors());
  graph.insertNode(call);
  return graph.insertNode(graph.createListUnpack(call->output(), partition.chain_outputs.size()));
}

// Uses of `old` after the region now read `replacement`.
void redirectUsesAfter(const Partition& partition, Value* old, Value* replacement) {
  const torch::jit::Block* top = partition.graph->block();
  const auto uses = old->uses();  // copied: replaceInput edits the list
  for (const auto& use : uses) {
    Node* user = use.user;
    while (user->owningBlock() != top) user = user->owningBlock()->owningNode();
    if (user->isAfter(partition.last_node)) use.user->replaceInput(use.offset, replacement);
  }
}

// Uses of the chain outputs after the region now read the op's outputs, and those of a list that
// crosses the chain's end a list built again from its elements there.
void redirectChainOutputs(const Partition& partition, Node* unpack) {
  for (size_t i = 0; i < partition.chain_outputs.size(); ++i) {
    Value* old = partition.chain_outputs[i];
    Value* replacement = unpack->output(i);
    replacement->setType(old->type());
    redirectUsesAfter(partition, old, replacement);
  }
  auto& graph = *partition.graph;
  torch::jit::WithInsertPoint guard(unpack->next());
  for (const ListOutput& list : partition.chain_output_lists) {
    std::vector<Value*> elements;
    for (Value* e : list.elements) {
      const auto at = std::find(partition.chain_outputs.begin(), partition.chain_outputs.end(), e);
      TORCH_INTERNAL_ASSERT(at != partition.chain_outputs.end(),
                            "rewriteChain: a list element is not among the chain outputs");
      elements.push_back(unpack->output(at - partition.chain_outputs.begin()));
    }
    const auto type = list.list->type()->expectRef<c10::ListType>().getElementType();
    redirectUsesAfter(partition, list.list,
                      graph.insertNode(graph.createList(type, elements))->output());
  }
}

// Removes the region, last node first so that every use inside it is gone before its value.
void removeRegion(Partition& partition) {
  Node* node = partition.last_node;
  while (true) {
    Node* previous = node->prev();
    const bool first = node == partition.first_node;
    node->destroy();
    if (first) break;
    node = previous;
  }
  torch::jit::EliminateDeadCode(partition.graph);
  partition.first_node = partition.last_node = nullptr;
}

// The forward's first op notes where it begins, for what a plan made in the call counts
// (runtime/forward_start.h); it takes the forward's arguments but `self`.
void insertForwardBegins(torch::jit::Graph& graph) {
  std::vector<Value*> arguments(graph.inputs().begin() + 1, graph.inputs().end());
  Node* begins = graph.create(c10::Symbol::fromQualString(kForwardBegins), arguments, 0);
  graph.prependNode(begins);
}

// jitckpt.strip's way back: the forward as it was, as a method of the module's class.
void keepOriginalForward(torch::jit::Module& module, torch::jit::Graph& forward) {
  const c10::QualifiedName name(*module.type()->name(), kOriginalForward);
  auto* function = module._ivalue()->compilation_unit()->create_function(name, forward.copy());
  module.type()->addMethod(function);
}

}  // namespace

void rewriteChain(torch::jit::Module& module, Partition& partition,
                  const c10::intrusive_ptr<Plan>& plan) {
  TORCH_CHECK(!module.hasattr(kPlanAttribute),
              "this module was already rewritten by jitckpt; "
              "call jitckpt.checkpoint on the original module instead");
  TORCH_CHECK(plan, "rewriteChain: no plan");
  TORCH_CHECK(partition.first_node && partition.last_node && partition.graph,
              "rewriteChain: the partition has no chain region (was it rewritten already?)");
  TORCH_CHECK(partition.graph == module.get_method("forward").graph(),
              "rewriteChain: the partition is not of this module's forward graph; partition the "
              "module with partitionClone (or partitionGraph on its own inlined forward graph)");
  const ChainStages& stages = plan->stages();
  TORCH_CHECK(static_cast<size_t>(stages.size()) == partition.stages.size() &&
                  stages.lifted().size() == partition.lifted.size(),
              "rewriteChain: the plan has ", stages.size(), " stages and ", stages.lifted().size(),
              " lifted values, the partition ", partition.stages.size(), " and ",
              partition.lifted.size(), "; make the plan from this partition (chainStagesOf)");
  keepOriginalForward(module, partition.user_forward ? *partition.user_forward : *partition.graph);
  module.register_attribute(kPlanAttribute, planType(), c10::IValue(plan));
  Node* unpack = insertChainCall(partition, stages);
  redirectChainOutputs(partition, unpack);
  removeRegion(partition);
  insertForwardBegins(*partition.graph);
}

}  // namespace jitckpt
