// Recut pass (see recut.h).
#include "passes/recut.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "passes/partition/module.h"  // chainStagesOf
#include "passes/partition/value_bytes.h"

namespace jitckpt {
namespace {

// What the chain call of a rewritten module hands its stages: the chain's inputs and outputs, and
// the lifted values by name.
struct ChainInterface {
  std::vector<torch::jit::Value*> inputs, outputs;
  std::vector<std::string> lifted;
  size_t last_stage_outputs = 0;

  explicit ChainInterface(const Partition& p)
      : inputs(p.chain_inputs),
        outputs(p.chain_outputs),
        last_stage_outputs(p.stages.empty() ? 0 : p.stages.back().graph->outputs().size()) {
    for (const LiftedInput& l : p.lifted) lifted.push_back(l.name);
  }
  bool operator==(const ChainInterface& o) const {
    return inputs == o.inputs && outputs == o.outputs && lifted == o.lifted &&
           last_stage_outputs == o.last_stage_outputs;
  }
};

// Whether `counted` is the partition `stages` were made from: as many stages, chain inputs and
// outputs (measureChainBytes matches the lifted values).
bool madeFrom(const Partition& counted, const ChainStages& stages) {
  return counted.stages.size() == static_cast<size_t>(stages.size()) &&
         counted.chain_inputs.size() == stages.stage(1).num_activation_inputs &&
         counted.stages.back().graph->outputs().size() ==
             stages.stage(stages.size()).graph->outputs().size();
}

}  // namespace

std::shared_ptr<const ChainStages> recutStages(const ForwardToCut& source,
                                               const ChainStages& stages,
                                               const ChainArguments& arguments) {
  std::optional<ChainInterface> counted_interface;
  PartitionOptions options = source.options;
  options.warn = false;  // (the rewrite warned)
  Partition recut =
      partitionGraphMeasured(source.forward->copy(), options, [&](const CountCut& cut) {
        const Partition& counted = cut.partition();
        if (!madeFrom(counted, stages)) return ValueBytes{};
        ValueBytes bytes = measureChainBytes(counted, stages, arguments);
        if (!bytes.empty()) counted_interface.emplace(counted);
        return bytes;
      });
  if (!counted_interface || !(ChainInterface(recut) == *counted_interface)) return nullptr;
  // Names and kinds as the rewrite gave them (bound to the module's values: bindOptionalTensors).
  for (size_t k = 0; k < recut.lifted.size(); ++k) {
    recut.lifted[k].name = stages.lifted()[k].name;
    recut.lifted[k].kind = stages.lifted()[k].kind;
  }
  return chainStagesOf(recut);
}

}  // namespace jitckpt
