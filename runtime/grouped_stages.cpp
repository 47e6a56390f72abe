// Grouped stages (see grouped_stages.h).
#include "runtime/grouped_stages.h"

#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "solver/stage_groups.h"

namespace jitckpt {
namespace {

using torch::jit::Graph;
using torch::jit::Value;

// Per stage k (1..L-1): whether stage k + 1 may join stage k under `schedule`.
std::vector<bool> mayJoin(const ChainStages& stages, const solver::Schedule& schedule,
                          StageCasts casts) {
  const int L = stages.size();
  std::vector<bool> records_only(static_cast<size_t>(L) + 1, true);  // every forward is Fall
  for (const auto& op : schedule) {
    if (op.stage <= L && op.kind != solver::OpKind::Backward &&
        op.kind != solver::OpKind::ForwardAll)
      records_only[op.stage] = false;
  }
  auto unsafe = [&](int l) { return stages.hasAutogradDependentKernels(l) && !records_only[l]; };
  std::vector<bool> may(static_cast<size_t>(L), false);
  const bool records_to_join = casts == StageCasts::EndWithEachStage;
  for (int k = 1; k < L; ++k) {
    may[k] = !stages.stage(k + 1).writes_activation_input && !unsafe(k) && !unsafe(k + 1) &&
             !stages.copiesParameterGradients(k + 1) &&
             (!records_to_join || (records_only[k] && records_only[k + 1]));
  }
  return may;
}

// Stages first..last as one: their graphs one after the other, each reading the outputs of the
// one before and one graph input per lifted value, in the order the stages first read them.
StageSpec joinedStage(const ChainStages& stages, int first, int last, StageCasts casts) {
  const StageSpec& head = stages.stage(first);
  StageSpec joined;
  joined.graph = std::make_shared<Graph>();
  joined.num_activation_inputs = head.num_activation_inputs;
  joined.writes_activation_input = head.writes_activation_input;
  joined.label = head.label + " .. " + stages.stage(last).label;
  std::vector<Value*> activations;
  for (size_t i = 0; i < head.num_activation_inputs; ++i) {
    activations.push_back(joined.graph->addInput()->copyMetadata(head.graph->inputs()[i]));
  }
  std::unordered_map<size_t, Value*> lifted_inputs;
  for (int l = first; l <= last; ++l) {
    const StageSpec& stage = stages.stage(l);
    for (size_t j = 0; j < stage.lifted.size(); ++j) {
      const size_t k = stage.lifted[j];
      if (lifted_inputs.count(k)) continue;
      Value* input = stage.graph->inputs()[stage.num_activation_inputs + j];
      lifted_inputs[k] = joined.graph->addInput()->copyMetadata(input);
      joined.lifted.push_back(k);
    }
    for (size_t k : stage.mutated_lifted) {
      if (std::find(joined.mutated_lifted.begin(), joined.mutated_lifted.end(), k) ==
          joined.mutated_lifted.end())
        joined.mutated_lifted.push_back(k);
    }
  }
  for (int l = first; l <= last; ++l) {
    const StageSpec& stage = stages.stage(l);
    std::vector<Value*> inputs = activations;
    for (size_t k : stage.lifted) inputs.push_back(lifted_inputs.at(k));
    activations = torch::jit::insertGraph(*joined.graph, *stage.graph, inputs);
    if (casts == StageCasts::EndWithEachStage && l < last)
      joined.graph->insertNode(joined.graph->create(c10::Symbol::fromQualString(kEndOfStageCasts),
                                                    /*num_outputs=*/0));
  }
  for (Value* v : activations) joined.graph->registerOutput(v);
  return joined;
}

}  // namespace

GroupedChain groupStages(const std::shared_ptr<const ChainStages>& stages,
                         const solver::Schedule& schedule, StageCasts casts) {
  const int L = stages->size();
  const solver::StageGroups groups =
      solver::groupStages(schedule, L, mayJoin(*stages, schedule, casts));
  if (groups.size() == L) return {stages, schedule, groups.first};
  std::vector<StageSpec> specs;
  for (int g = 0; g < groups.size(); ++g) {
    const int first = groups.first[g];
    const int last = solver::lastStageOf(groups.first, static_cast<size_t>(g), L);
    specs.push_back(first == last ? stages->stage(first)
                                  : joinedStage(*stages, first, last, casts));
  }
  auto grouped = std::make_shared<const ChainStages>(specs, stages->lifted());
  for (int g = 0; g < groups.size(); ++g) {  // only a group's first stage may copy (mayJoin)
    if (stages->copiesParameterGradients(groups.first[g]))
      grouped->setCopiesParameterGradients(g + 1);
  }
  return {std::move(grouped), groups.schedule, groups.first};
}

}  // namespace jitckpt
