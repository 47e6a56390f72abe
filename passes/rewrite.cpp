// Rewrite pass (see rewrite.h).
#include "passes/rewrite.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

#include <optional>

namespace jitckpt {
namespace {

bool hasCalls(const torch::jit::Block* block) {
  for (const torch::jit::Node* n : block->nodes()) {
    if (n->kind() == c10::prim::CallMethod || n->kind() == c10::prim::CallFunction) return true;
    for (const torch::jit::Block* b : n->blocks()) {
      if (hasCalls(b)) return true;
    }
  }
  return false;
}

// The current value of a lifted attribute: follows its prim::GetAttr chain from `self`.
std::optional<c10::IValue> attributeValue(const torch::jit::Module& module,
                                          const torch::jit::Value* value) {
  std::vector<std::string> path;
  const torch::jit::Value* v = value;
  while (v->node()->kind() == c10::prim::GetAttr) {
    path.push_back(v->node()->s(c10::attr::name));
    v = v->node()->input(0);
  }
  if (v != v->owningGraph()->inputs().at(0)) return std::nullopt;
  c10::IValue current = module._ivalue();
  for (auto it = path.rbegin(); it != path.rend(); ++it)
    current = current.toObjectRef().getAttr(*it);
  return current;
}

// An Optional[Tensor] attribute that holds None (Conv2d's bias=False) cannot travel in the op's
// Tensor[]: it goes with the scalars (Any[]). Rewrites the plan's kinds and positions to match.
void bindOptionalTensors(const torch::jit::Module& module, const Partition& partition, Plan& plan) {
  bool changed = false;
  for (size_t k = 0; k < partition.lifted.size(); ++k) {
    const LiftedInput& l = partition.lifted[k];
    if (plan.lifted_kinds[k] == LiftedKind::Scalar ||
        l.value->type()->kind() == c10::TypeKind::TensorType)
      continue;
    const auto current = attributeValue(module, l.value);
    TORCH_CHECK(current, "rewriteChain: cannot find the module attribute behind lifted value '",
                l.name, "'");
    if (current->isNone()) {
      plan.lifted_kinds[k] = LiftedKind::Scalar;
      changed = true;
    }
  }
  if (!changed) return;
  size_t tensors = 0, scalars = 0;
  for (size_t k = 0; k < plan.lifted_kinds.size(); ++k) {
    plan.lifted_position[k] = plan.lifted_kinds[k] == LiftedKind::Scalar ? scalars++ : tensors++;
  }
}

}  // namespace

PartitionedClone partitionClone(const torch::jit::Module& module, const PartitionOptions& options,
                                bool share_tensors) {
  TORCH_CHECK(!isRewritten(module),
              "this module was already rewritten by jitckpt; "
              "call jitckpt.checkpoint on the original module instead");
  TORCH_CHECK(module.find_method("forward"), "the module has no forward method to checkpoint");
  torch::jit::Module clone;
  if (share_tensors) {
    clone = module.clone(/*inplace=*/true);
  } else {
    // Deep copies made under grad would be non-leaf tensors (CloneBackward): copy without grad,
    // then give each parameter copy the original's requires_grad.
    {
      c10::AutoGradMode no_grad(false);
      clone = module.clone(/*inplace=*/false);
    }
    auto originals = module.named_parameters();
    auto copies = clone.named_parameters();
    for (auto o = originals.begin(), c = copies.begin(); o != originals.end() && c != copies.end();
         ++o, ++c) {
      (*c).value.requires_grad_((*o).value.requires_grad());
    }
  }
  // Like torch.jit.freeze: edit the clone's own forward graph in place (inlined, then taken over
  // by the partition), so that rewriteChain's edits are the clone's forward.
  auto graph = clone.get_method("forward").graph();
  // With graph executor optimization off, Inline inlines one level only (callees' graphs are not
  // pre-inlined then): repeat until no call is left that Inline can inline.
  for (int level = 0; level < 64 && hasCalls(graph->block()); ++level) torch::jit::Inline(*graph);
  Partition partition = partitionGraph(graph, options);
  return {std::move(clone), std::move(partition)};
}

bool isRewritten(const torch::jit::Module& module) { return module.hasattr(kPlanAttribute); }

c10::intrusive_ptr<Plan> planOf(const torch::jit::Module& module) {
  if (!isRewritten(module)) return {};
  const c10::IValue value = module.attr(kPlanAttribute);
  return value.isCustomClass() ? value.toCustomClass<Plan>() : c10::intrusive_ptr<Plan>();
}

void rewriteChain(torch::jit::Module& module, Partition& partition,
                  const c10::intrusive_ptr<Plan>& plan) {
  using torch::jit::Value;
  TORCH_CHECK(!isRewritten(module),
              "this module was already rewritten by jitckpt; "
              "call jitckpt.checkpoint on the original module instead");
  TORCH_CHECK(plan, "rewriteChain: no plan");
  TORCH_CHECK(partition.first_node && partition.last_node && partition.graph,
              "rewriteChain: the partition has no chain region (was it rewritten already?)");
  TORCH_CHECK(partition.graph == module.get_method("forward").graph(),
              "rewriteChain: the partition is not of this module's forward graph; partition the "
              "module with "
              "partitionClone (or partitionGraph on its own inlined forward graph)");
  TORCH_CHECK(plan->stages.size() == partition.stages.size() &&
                  plan->lifted_names.size() == partition.lifted.size(),
              "rewriteChain: the plan has ", plan->stages.size(), " stages and ",
              plan->lifted_names.size(), " lifted values, the partition ", partition.stages.size(),
              " and ", partition.lifted.size(),
              "; make the plan with Plan::fromPartition on this partition");
  plan->validate();
  bindOptionalTensors(module, partition, *plan);
  auto& graph = *partition.graph;
  module.register_attribute(kPlanAttribute, planType(), c10::IValue(plan));

  torch::jit::WithInsertPoint guard(partition.first_node);
  Value* inputs =
      graph.insertNode(graph.createList(c10::TensorType::get(), partition.chain_inputs))->output();
  std::vector<Value*> tensors, scalars;
  for (size_t k = 0; k < partition.lifted.size(); ++k) {
    const LiftedInput& l = partition.lifted[k];
    if (plan->lifted_kinds[k] == LiftedKind::Scalar) {
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
  torch::jit::Node* call = graph.create(c10::Symbol::fromQualString("jitckpt::chain"),
                                        {inputs, lifted_tensors, lifted_scalars, plan_value}, 1);
  call->output()->setType(c10::ListType::ofTensors());
  graph.insertNode(call);
  torch::jit::Node* unpack =
      graph.insertNode(graph.createListUnpack(call->output(), partition.chain_outputs.size()));

  // Uses of the chain outputs after the region now read the op's outputs.
  for (size_t i = 0; i < partition.chain_outputs.size(); ++i) {
    Value* old = partition.chain_outputs[i];
    Value* replacement = unpack->output(i);
    replacement->setType(old->type());
    const auto uses = old->uses();  // copied: replaceInput edits the list
    for (const auto& use : uses) {
      torch::jit::Node* user = use.user;
      while (user->owningBlock() != graph.block()) user = user->owningBlock()->owningNode();
      if (user->isAfter(partition.last_node)) use.user->replaceInput(use.offset, replacement);
    }
  }
  // Remove the region, last node first so that every use inside it is gone before its value.
  torch::jit::Node* node = partition.last_node;
  while (true) {
    torch::jit::Node* previous = node->prev();
    const bool first = node == partition.first_node;
    node->destroy();
    if (first) break;
    node = previous;
  }
  torch::jit::EliminateDeadCode(partition.graph);
  partition.first_node = partition.last_node = nullptr;
}

}  // namespace jitckpt
