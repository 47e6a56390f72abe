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

namespace {

// Steps 1 to 6: the graph edited for cutting, and its top-level positions.
struct PreparedGraph {
  std::shared_ptr<Graph> graph;
  std::unique_ptr<torch::jit::AliasDb> alias_db;
  partition_steps::TopLevelNodes top;
};

PreparedGraph prepareForCuts(std::shared_ptr<Graph> graph) {
  TORCH_CHECK(graph, "partition: null graph");
  partition_steps::hoistAttributesAndConstants(*graph);  // 1
  partition_steps::splitMixedIfs(*graph);                // 2
  partition_steps::sinkTensorLists(*graph);              // 3, before side computations are hoisted
  auto alias_db = std::make_unique<torch::jit::AliasDb>(graph);
  const size_t num_side_nodes = partition_steps::hoistSideComputations(*graph, *alias_db);  // 4
  auto carried_flags = partition_steps::carryScalarsAsTensors(*graph, num_side_nodes);      // 5
  if (!carried_flags.empty()) alias_db = std::make_unique<torch::jit::AliasDb>(graph);
  partition_steps::TopLevelNodes top =  // 6
      partition_steps::listTopLevel(*graph, num_side_nodes, std::move(carried_flags));
  return {std::move(graph), std::move(alias_db), std::move(top)};
}

// Steps 7 to 10, which leave the graph as it is.
Partition cutPrepared(const PreparedGraph& prepared, const PartitionOptions& options,
                      const ValueBytes& bytes) {
  const partition_steps::CandidateCuts candidates =  // 7
      partition_steps::findCandidateCuts(prepared.top, *prepared.alias_db, bytes);
  Partition partition;
  partition.graph = prepared.graph;
  partition.bytes_measured = !bytes.empty();
  const std::vector<const partition_steps::Cut*> chosen =  // 8
      partition_steps::chooseCuts(prepared.top, candidates,
                                  partition_steps::countHeavyOps(prepared.top), options,
                                  partition.warnings);
  partition_steps::buildStages(partition, prepared.top, chosen, *prepared.alias_db);  // 9
  partition_steps::labelStagesByModule(partition);                                    // 10
  return partition;
}

Partition warned(Partition partition, const PartitionOptions& options) {
  if (options.warn) {
    for (const std::string& why : partition.warnings) TORCH_WARN("jitckpt partition: ", why);
  }
  return partition;
}

}  // namespace

Partition partitionGraph(std::shared_ptr<Graph> graph, const PartitionOptions& options,
                         const ValueBytes& bytes) {
  return warned(cutPrepared(prepareForCuts(std::move(graph)), options, bytes), options);
}

Partition partitionGraphMeasured(std::shared_ptr<Graph> graph, const PartitionOptions& options,
                                 const MeasureBytes& measure) {
  const PreparedGraph prepared = prepareForCuts(std::move(graph));
  CountCut counted(prepared.graph, [&] { return cutPrepared(prepared, options, {}); });
  const ValueBytes bytes = measure(counted);
  return warned(bytes.empty() ? std::move(counted).take() : cutPrepared(prepared, options, bytes),
                options);
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

std::vector<std::string> prologueAttributePaths(const Partition& partition) {
  std::set<std::string> paths;
  for (const torch::jit::Node* n : partition.graph->block()->nodes()) {
    if (n == partition.first_node) break;
    collectAttributeReads(n, paths);
  }
  return {paths.begin(), paths.end()};
}

}  // namespace jitckpt
