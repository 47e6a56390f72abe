// Partition pass: inlined forward graph -> chain of standalone stage graphs (see partition.h).
// partitionGraph runs the steps in order; steps.h says what each takes and returns.
#include "passes/partition/partition.h"

#include <torch/csrc/jit/ir/alias_analysis.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "passes/partition/steps.h"

namespace jitckpt {

using torch::jit::Graph;

Partition partitionGraph(std::shared_ptr<Graph> graph, const PartitionOptions& options,
                         const ValueBytes& bytes) {
  namespace steps = partition_steps;
  TORCH_CHECK(graph, "partition: null graph");
  steps::hoistAttributesAndConstants(*graph);  // 1
  steps::splitMixedIfs(*graph);                // 2
  steps::sinkTensorLists(*graph);              // 3, before side computations are hoisted
  auto alias_db = std::make_unique<torch::jit::AliasDb>(graph);
  const size_t num_side_nodes = steps::hoistSideComputations(*graph, *alias_db);  // 4
  auto carried_flags = steps::carryScalarsAsTensors(*graph, num_side_nodes);      // 5
  if (!carried_flags.empty()) alias_db = std::make_unique<torch::jit::AliasDb>(graph);
  const steps::TopLevelNodes top =  // 6
      steps::listTopLevel(*graph, num_side_nodes, std::move(carried_flags));
  const steps::CandidateCuts candidates = steps::findCandidateCuts(top, *alias_db, bytes);  // 7

  Partition partition;
  partition.graph = graph;
  partition.bytes_measured = !bytes.empty();
  const std::vector<const steps::Cut*> chosen =  // 8
      steps::chooseCuts(top, candidates, steps::countHeavyOps(top), options, partition.warnings);
  steps::buildStages(partition, top, chosen, *alias_db);  // 9
  steps::labelStagesByModule(partition);                  // 10
  return partition;
}

namespace {

// The tensor attributes `n` reads, in its nested blocks too.
void collectAttributeReads(const torch::jit::Node* n, std::set<std::string>& paths) {
  for (const torch::jit::Value* v : n->inputs()) {
    if (v->node()->kind() == c10::prim::GetAttr && v->type()->isSubtypeOf(*c10::TensorType::get()))
      paths.insert(partition_steps::attributePath(v));
  }
  for (const torch::jit::Block* b : n->blocks()) {
    for (const torch::jit::Node* inner : b->nodes()) collectAttributeReads(inner, paths);
  }
}

}  // namespace

std::vector<std::string> epilogueAttributePaths(const Partition& partition) {
  std::set<std::string> paths;
  const torch::jit::Node* end = partition.graph->block()->return_node();
  for (const torch::jit::Node* n = partition.last_node->next(); n != end; n = n->next())
    collectAttributeReads(n, paths);
  return {paths.begin(), paths.end()};
}

}  // namespace jitckpt
