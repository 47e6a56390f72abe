// Partition at module level (see module.h).
#include "passes/partition/module.h"

#include <c10/core/GradMode.h>

#include <optional>
#include <string>
#include <unordered_map>

#include "passes/example_copies.h"
#include "passes/graph_walk.h"
#include "passes/inline_calls.h"
#include "passes/partition/call_values.h"
#include "passes/partition/value_bytes.h"
#include "passes/tensor_dicts.h"
#include "runtime/plan.h"

namespace jitckpt {

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

namespace {

// Deep copies made under grad would be non-leaf tensors (CloneBackward): copy without grad, then
// give each parameter copy the original's requires_grad.
torch::jit::Module deepClone(const torch::jit::Module& module) {
  torch::jit::Module clone;
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
  return clone;
}

}  // namespace

void bindTensorListAttributes(const torch::jit::Module& module, torch::jit::Graph& graph) {
  std::vector<torch::jit::Node*> list_reads;
  for (torch::jit::Node* n : graph.nodes()) {
    forEachNestedNode(n, [&](torch::jit::Node* m) {
      if (m->kind() == c10::prim::GetAttr && *m->output()->type() == *c10::ListType::ofTensors())
        list_reads.push_back(m);
    });
  }
  for (torch::jit::Node* n : list_reads) {
    const auto owner = attributeValue(module, n->input(0));
    const auto list = attributeValue(module, n->output());
    if (!owner || !owner->isObject() || !list || !list->isTensorList()) continue;
    // The owner's tensor attributes, by the tensor they hold.
    const auto& object = owner->toObjectRef();
    const auto cls = object.type();
    std::unordered_map<const c10::TensorImpl*, std::string> names;
    for (size_t slot = 0; slot < cls->numAttributes(); ++slot) {
      const c10::IValue& v = object.getSlot(slot);
      if (v.isTensor() && v.toTensor().defined())
        names.emplace(v.toTensor().unsafeGetTensorImpl(), cls->getAttributeName(slot));
    }
    std::vector<std::string> element_names;
    for (const at::Tensor& t : list->toTensorList().vec()) {
      auto it = t.defined() ? names.find(t.unsafeGetTensorImpl()) : names.end();
      if (it == names.end()) break;
      element_names.push_back(it->second);
    }
    if (element_names.size() != list->toTensorList().size()) continue;
    torch::jit::WithInsertPoint guard(n);
    std::vector<torch::jit::Value*> reads;
    for (const auto& name : element_names) reads.push_back(graph.insertGetAttr(n->input(0), name));
    torch::jit::Value* rebuilt =
        graph.insertNode(graph.createList(c10::TensorType::get(), reads))->output();
    n->output()->replaceAllUsesWith(rebuilt);
    n->destroy();
  }
}

void bindOptionalTensors(const torch::jit::Module& module, Partition& partition) {
  for (LiftedInput& l : partition.lifted) {
    if (l.kind == LiftedKind::Scalar || l.value->type()->kind() == c10::TypeKind::TensorType)
      continue;
    const auto current = attributeValue(module, l.value);
    TORCH_INTERNAL_ASSERT(current, "cannot find the module attribute behind lifted value '", l.name,
                          "'");
    if (current->isNone()) l.kind = LiftedKind::Scalar;
  }
}

namespace {

// What both entry points do to a forward graph before partitioning it: calls inlined,
// tensor-list attributes bound, tensor dicts unpacked.
void prepareForward(const torch::jit::Module& module,
                    const std::shared_ptr<torch::jit::Graph>& graph) {
  inlineAllCalls(graph);
  bindTensorListAttributes(module, *graph);
  unpackTensorDicts(module, graph);
}

// Partitions `graph`, by the bytes its values hold on the example inputs where there are any
// (measured on the graph as the partition edited it, so that what its edits make is measured
// too), otherwise by tensor count.
Partition partitionOnExamples(const torch::jit::Module& module,
                              std::shared_ptr<torch::jit::Graph> graph,
                              const PartitionOptions& options,
                              const std::vector<c10::IValue>& example_inputs) {
  if (example_inputs.empty()) return partitionGraph(std::move(graph), options);
  return partitionGraphMeasured(std::move(graph), options, [&](const CountCut& counted) {
    return measureValueBytes(module, *counted.graph(),
                             examplesToRunOn(counted.graph(), example_inputs));
  });
}

}  // namespace

Partition partitionModule(const torch::jit::Module& module, const PartitionOptions& options,
                          const std::vector<c10::IValue>& example_inputs) {
  auto method = module.find_method("forward");
  TORCH_CHECK(method, "partition: the module has no forward method");
  auto graph = method->graph()->copy();
  prepareForward(module, graph);
  return partitionOnExamples(module, graph, options, example_inputs);
}

PartitionedClone partitionClone(const torch::jit::Module& module, const PartitionOptions& options,
                                bool share_tensors,
                                const std::vector<c10::IValue>& example_inputs) {
  TORCH_CHECK(!module.hasattr(kPlanAttribute),
              "this module was already rewritten by jitckpt; "
              "call jitckpt.checkpoint on the original module instead");
  TORCH_CHECK(module.find_method("forward"), "the module has no forward method to checkpoint");
  torch::jit::Module clone = share_tensors ? module.clone(/*inplace=*/true) : deepClone(module);
  // Like torch.jit.freeze: edit the clone's own forward graph in place (inlined, then taken over
  // by the partition), so that rewriteChain's edits are the clone's forward.
  auto graph = clone.get_method("forward").graph();
  auto user_forward = graph->copy();
  prepareForward(clone, graph);
  auto original_forward = graph->copy();
  Partition partition = partitionOnExamples(clone, graph, options, example_inputs);
  partition.original_forward = std::move(original_forward);
  partition.user_forward = std::move(user_forward);
  bindOptionalTensors(clone, partition);
  return {std::move(clone), std::move(partition)};
}

std::shared_ptr<const ChainStages> chainStagesOf(const Partition& partition) {
  // (a partition already rewritten has no region left to look after)
  const std::vector<std::string> after =
      partition.last_node ? epilogueAttributePaths(partition) : std::vector<std::string>{};
  std::vector<LiftedSpec> lifted;
  for (const LiftedInput& l : partition.lifted) {
    const bool read_after =
        !partition.last_node || std::find(after.begin(), after.end(), l.name) != after.end();
    lifted.push_back({l.name, l.kind, variesBeyondShapes(l.value), read_after});
  }
  std::vector<StageSpec> stages;
  for (const Stage& s : partition.stages) {
    stages.push_back({s.graph, s.num_activation_inputs, s.lifted, s.mutated_lifted,
                      s.writes_activation_input, s.label});
  }
  return std::make_shared<const ChainStages>(stages, std::move(lifted));
}

}  // namespace jitckpt
