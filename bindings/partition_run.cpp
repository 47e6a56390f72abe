// Piecewise execution of a Partition (see partition_run.h): prologue, stages, epilogue, each a
// separate graph run by torch::jit::Code + InterpreterState (no profiling, no fusion).
#include "bindings/partition_run.h"

#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "passes/graph_walk.h"
#include "passes/prologue.h"

namespace jitckpt {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

std::vector<c10::IValue> runGraph(const std::shared_ptr<Graph>& graph,
                                  std::vector<c10::IValue> stack) {
  torch::jit::Code code(graph, "jitckpt_partition_piece");
  torch::jit::InterpreterState state(code);
  state.run(stack);
  return stack;
}

// Values carried from the prologue: chain inputs, lifted values, and prologue values that the
// epilogue reads. Region values read after the region must be chain outputs.
std::vector<Value*> carriedValues(const Partition& partition) {
  Graph& graph = *partition.graph;
  std::unordered_set<const Node*> region, before;  // top-level nodes in and before the region
  bool in_region = false, after = false;
  for (Node* n : graph.nodes()) {
    if (n == partition.first_node) in_region = true;
    if (!after) (in_region ? region : before).insert(n);
    if (n == partition.last_node) after = true;
  }
  std::vector<Value*> carried(partition.chain_inputs.begin(), partition.chain_inputs.end());
  for (const auto& lifted : partition.lifted) carried.push_back(lifted.value);
  std::unordered_set<const Value*> chain_outputs(partition.chain_outputs.begin(),
                                                 partition.chain_outputs.end());
  for (const ListOutput& list : partition.chain_output_lists) chain_outputs.insert(list.list);
  auto definedBefore = [&](const Value* v) {
    return v->node() == graph.param_node() || before.count(v->node());
  };
  for (Node* n = partition.last_node->next();; n = n->next()) {
    forEachNestedNode(
        n,
        [&](Node* cur) {
          for (Value* v : cur->inputs()) {
            if (region.count(v->node())) {
              TORCH_CHECK(
                  chain_outputs.count(v), "runPartitioned: %", v->debugName(),
                  " is defined in the chain region and read after it, but is no chain output");
            } else if (definedBefore(v) &&
                       std::find(carried.begin(), carried.end(), v) == carried.end()) {
              carried.push_back(v);
            }
          }
        },
        BlockReturns::Visit);
    if (n == graph.return_node()) break;
  }
  return carried;
}

// Epilogue: the carried values and the chain outputs -> the method's outputs.
std::vector<c10::IValue> runEpilogue(const Partition& partition, const std::vector<Value*>& carried,
                                     const std::unordered_map<const Value*, c10::IValue>& value_of,
                                     const std::vector<c10::IValue>& chain_outputs) {
  Graph& graph = *partition.graph;
  auto epilogue = std::make_shared<Graph>();
  std::unordered_map<Value*, Value*> map;
  std::vector<c10::IValue> inputs;
  for (Value* v : carried) {
    map[v] = epilogue->addInput()->setType(v->type());
    inputs.push_back(value_of.at(v));
  }
  for (size_t j = 0; j < partition.chain_outputs.size(); ++j) {
    Value* v = partition.chain_outputs[j];
    if (map.count(v)) continue;  // a chain output that is also a chain input (empty region)
    map[v] = epilogue->addInput()->setType(v->type());
    inputs.push_back(chain_outputs[j]);
  }
  for (const ListOutput& list :
       partition.chain_output_lists) {  // built again, as rewriteChain does
    std::vector<Value*> elements;
    for (Value* e : list.elements) elements.push_back(map.at(e));
    const auto type = list.list->type()->expectRef<c10::ListType>().getElementType();
    map[list.list] = epilogue->appendNode(epilogue->createList(type, elements))->output();
  }
  auto env = [&](Value* v) { return map.at(v); };
  for (Node* n = partition.last_node->next(); n != graph.return_node(); n = n->next()) {
    Node* copy = epilogue->appendNode(epilogue->createClone(n, env));
    for (size_t o = 0; o < n->outputs().size(); ++o) map[n->output(o)] = copy->output(o);
  }
  for (Value* v : graph.outputs()) epilogue->registerOutput(map.at(v));
  return runGraph(epilogue, std::move(inputs));
}

}  // namespace

PartitionedRun runPartitioned(const Partition& partition, std::vector<c10::IValue> method_inputs) {
  TORCH_CHECK(partition.first_node && partition.last_node,
              "runPartitioned: the partition has no chain region");
  TORCH_CHECK(method_inputs.size() == partition.graph->inputs().size(), "runPartitioned: expected ",
              partition.graph->inputs().size(), " method inputs (self first), got ",
              method_inputs.size());
  const std::vector<Value*> carried = carriedValues(partition);
  const std::vector<c10::IValue> carried_values =
      runGraph(prologueGraph(partition, carried), method_inputs);
  std::unordered_map<const Value*, c10::IValue> value_of;
  for (size_t i = 0; i < carried.size(); ++i) value_of[carried[i]] = carried_values[i];

  PartitionedRun run;
  std::vector<c10::IValue> boundary;
  for (Value* v : partition.chain_inputs) boundary.push_back(value_of.at(v));
  for (const Stage& stage : partition.stages) {
    run.boundaries.emplace_back();
    for (const auto& t : boundary) run.boundaries.back().push_back(t.toTensor());
    std::vector<c10::IValue> stack = boundary;
    for (size_t k : stage.lifted) stack.push_back(value_of.at(partition.lifted[k].value));
    boundary = runGraph(stage.graph, std::move(stack));
  }
  run.boundaries.emplace_back();
  for (const auto& t : boundary) run.boundaries.back().push_back(t.toTensor());
  run.outputs = runEpilogue(partition, carried, value_of, boundary);
  return run;
}

}  // namespace jitckpt
