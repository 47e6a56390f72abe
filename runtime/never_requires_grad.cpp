// findNeverRequiresGrad (see never_requires_grad.h).
#include "runtime/never_requires_grad.h"

#include <torch/csrc/jit/ir/alias_analysis.h>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>

namespace jitckpt {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// Ops whose results autograd never gives a gradient: boolean and integer results, new tensors
// made like another (the factories' requires_grad is false), and detached ones (in place too:
// export records a tensor literal, torch.tensor(0.0), as a copy detached in place).
bool resultNeverRequiresGrad(const Node* n) {
  static const std::unordered_set<std::string> kinds = {
      "aten::eq",          "aten::ne",          "aten::lt",           "aten::le",
      "aten::gt",          "aten::ge",          "aten::logical_and",  "aten::logical_or",
      "aten::logical_xor", "aten::logical_not", "aten::isnan",        "aten::isinf",
      "aten::isfinite",    "aten::argmax",      "aten::argmin",       "aten::argsort",
      "aten::zeros_like",  "aten::ones_like",   "aten::empty_like",   "aten::full_like",
      "aten::rand_like",   "aten::randn_like",  "aten::randint_like", "aten::detach",
      "aten::detach_"};
  return kinds.count(n->kind().toQualString()) > 0;
}

bool hasRequiresGradArgument(const Node* n) {
  const auto* schema = n->maybeSchema();
  if (!schema) return false;
  for (const auto& argument : schema->arguments()) {
    if (argument.name() == "requires_grad") return true;
  }
  return false;
}

// Whether a value of this type may hold a tensor (a list of ints, a device, may not).
bool mayHoldTensor(const c10::TypePtr& type) {
  const c10::TypeKind kind = type->kind();
  if (kind == c10::TypeKind::TensorType || kind == c10::TypeKind::ClassType ||
      kind == c10::TypeKind::AnyType)
    return true;
  for (const auto& contained : type->containedTypes()) {
    if (mayHoldTensor(contained)) return true;
  }
  return false;
}

// The values of one stage graph that may require grad, given those of its inputs.
class StageFlow {
 public:
  explicit StageFlow(std::shared_ptr<torch::jit::Graph> graph) : graph_(std::move(graph)) {}

  void mark(const Value* v) {
    if (mayHoldTensor(v->type()) && may_.insert(v).second) changed_ = true;
  }
  bool may(const Value* v) const { return may_.count(v) > 0; }

  void run() {
    do {
      changed_ = false;
      visit(graph_->block());
    } while (changed_);
  }

 private:
  void visit(const Block* block) {
    for (const Node* n : block->nodes()) {
      if (n->blocks().empty()) {
        visitNode(n);
      } else {
        visitBlocks(n);
      }
    }
  }

  void visitNode(const Node* n) {
    if (n->kind() == c10::prim::Constant) return;
    const auto written = directlyWrittenInputs(n);
    bool from_may = false, from_may_unwritten = false;
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      if (!may(n->input(i))) continue;
      from_may = true;
      if (std::find(written.begin(), written.end(), i) == written.end()) from_may_unwritten = true;
    }
    if (!resultNeverRequiresGrad(n) && (from_may || hasRequiresGradArgument(n))) {
      for (const Value* o : n->outputs()) mark(o);
    }
    // Writing a value from one that may require grad gives it, and its aliases, a gradient.
    if (!from_may_unwritten) return;
    for (size_t i : written) {
      const Value* w = n->input(i);
      mark(w);
      if (w->node() != graph_->param_node()) markAliases(w);
    }
  }

  void visitBlocks(const Node* n) {
    for (const Block* b : n->blocks()) {
      if (n->kind() == c10::prim::Loop) {
        // carried values: block input 1 + j is loop input 2 + j and block output 1 + j
        for (size_t j = 0; j + 1 < b->inputs().size(); ++j) {
          if (may(n->input(2 + j)) || may(b->outputs().at(1 + j))) mark(b->inputs()[1 + j]);
        }
      }
      visit(b);
    }
    for (size_t k = 0; k < n->outputs().size(); ++k) {
      bool from_may = n->kind() != c10::prim::If && n->kind() != c10::prim::Loop;  // unknown
      for (const Block* b : n->blocks()) {
        const size_t at = n->kind() == c10::prim::Loop ? k + 1 : k;
        if (at < b->outputs().size() && may(b->outputs()[at])) from_may = true;
        if (n->kind() == c10::prim::Loop && may(b->inputs().at(k + 1))) from_may = true;
      }
      if (from_may) mark(n->outputs()[k]);
    }
  }

  // Once per written value; the alias analysis only where some value may still be marked (most
  // graphs have none left, and a chain run as one stage is a large graph).
  void markAliases(const Value* w) {
    if (!aliased_.insert(w).second) return;
    if (!collected_) {
      collect(graph_->block());
      collected_ = true;
    }
    unmarked_.erase(
        std::remove_if(unmarked_.begin(), unmarked_.end(), [&](const Value* v) { return may(v); }),
        unmarked_.end());
    if (unmarked_.empty()) return;
    if (!alias_db_) alias_db_ = std::make_unique<torch::jit::AliasDb>(graph_);
    for (const Value* v : unmarked_) {
      if (alias_db_->mayAlias(v, w)) mark(v);
    }
  }

  void collect(const Block* block) {
    auto add = [&](const Value* v) {
      if (mayHoldTensor(v->type()) && !may(v)) unmarked_.push_back(v);
    };
    for (const Value* v : block->inputs()) add(v);
    for (const Node* n : block->nodes()) {
      for (const Value* v : n->outputs()) add(v);
      for (const Block* b : n->blocks()) collect(b);
    }
  }

  std::shared_ptr<torch::jit::Graph> graph_;
  std::unordered_set<const Value*> may_;
  bool changed_ = false;
  std::unique_ptr<torch::jit::AliasDb> alias_db_;
  std::unordered_set<const Value*> aliased_;  // written values whose aliases are marked
  std::vector<const Value*> unmarked_;        // values that hold tensors and are not marked yet
  bool collected_ = false;
};

}  // namespace

NeverRequiresGrad findNeverRequiresGrad(const std::vector<StageSpec>& stages,
                                        const std::vector<LiftedSpec>& lifted,
                                        const std::vector<bool>& chain_inputs_never,
                                        bool with_outputs, const std::vector<bool>& lifted_never) {
  NeverRequiresGrad found;
  std::vector<bool> entering = chain_inputs_never;  // of the stage about to run
  for (const StageSpec& stage : stages) {
    const torch::jit::Graph& graph = *stage.graph;
    entering.resize(stage.num_activation_inputs, false);
    found.inputs.push_back(entering);
    if (!with_outputs && found.inputs.size() == stages.size()) return found;  // (a large group)
    StageFlow flow(stage.graph);
    for (size_t i = 0; i < stage.num_activation_inputs; ++i) {
      if (!entering[i]) flow.mark(graph.inputs()[i]);
    }
    // Lifted scalars never hold a tensor that requires grad (StageRunner refuses one).
    for (size_t j = 0; j < stage.lifted.size(); ++j) {
      const size_t k = stage.lifted[j];
      if (lifted.at(k).kind != LiftedKind::Scalar && !(k < lifted_never.size() && lifted_never[k]))
        flow.mark(graph.inputs()[stage.num_activation_inputs + j]);
    }
    flow.run();
    entering.clear();
    for (const Value* o : graph.outputs()) entering.push_back(!flow.may(o));
  }
  found.outputs = entering;
  return found;
}

}  // namespace jitckpt
