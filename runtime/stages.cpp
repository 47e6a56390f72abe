// ChainStages (see stages.h).
#include "runtime/stages.h"

#include <c10/util/Exception.h>

namespace jitckpt {
namespace {

bool containsRandomOps(const torch::jit::Block* block) {
  for (const torch::jit::Node* n : block->nodes()) {
    if (n->isNondeterministic()) return true;
    for (const auto* b : n->blocks()) {
      if (containsRandomOps(b)) return true;
    }
  }
  return false;
}

}  // namespace

std::string toString(LiftedKind kind) {
  switch (kind) {
    case LiftedKind::Parameter:
      return "parameter";
    case LiftedKind::Buffer:
      return "buffer";
    case LiftedKind::Scalar:
      return "scalar";
    case LiftedKind::Side:
      return "side";
  }
  return "?";
}

ChainStages::ChainStages(const std::vector<StageSpec>& stages, std::vector<LiftedSpec> lifted)
    : lifted_(std::move(lifted)) {
  TORCH_CHECK(!stages.empty(), "jitckpt: a chain needs at least one stage");
  size_t scalars = 0;
  for (const LiftedSpec& l : lifted_) {
    position_.push_back(l.kind == LiftedKind::Scalar ? scalars++ : num_tensors_++);
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    StageSpec stage = stages[s];
    TORCH_CHECK(stage.graph, "jitckpt: stage ", s + 1, " has no graph");
    stage.graph = stage.graph->copy();
    TORCH_CHECK(stage.graph->inputs().size() == stage.num_activation_inputs + stage.lifted.size(),
                "jitckpt: stage ", s + 1, " (", stage.label, ") has ", stage.graph->inputs().size(),
                " graph inputs, expected ", stage.num_activation_inputs, " activations and ",
                stage.lifted.size(), " lifted values");
    for (size_t k : stage.lifted) {
      TORCH_CHECK(k < lifted_.size(), "jitckpt: stage ", s + 1, " reads lifted value ", k, " of ",
                  lifted_.size());
    }
    random_.push_back(containsRandomOps(stage.graph->block()));
    stages_.push_back(std::move(stage));
  }
  codes_.resize(stages_.size());
}

torch::jit::Code& ChainStages::code(int l) const {
  std::lock_guard<std::mutex> lock(codes_mutex_);
  auto& code = codes_.at(l - 1);
  if (!code) {
    code = std::make_unique<torch::jit::Code>(stages_[l - 1].graph,
                                              "jitckpt_stage_" + std::to_string(l));
  }
  return *code;
}

}  // namespace jitckpt
