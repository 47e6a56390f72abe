// Step 9 of the partition pass: the chain region, its lifted inputs and one standalone graph per
// stage, with the stage's in-place writes and a fallback label.

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "passes/graph_walk.h"
#include "passes/keep_draws.h"
#include "passes/partition/steps.h"

namespace jitckpt::partition_steps {
namespace {

namespace prim = c10::prim;

// The chain's lifted inputs, appended to Partition::lifted as the stages first read them.
class LiftedInputs {
 public:
  LiftedInputs(const TopLevelNodes& top, size_t region_begin, std::vector<LiftedInput>& lifted)
      : top_(top), region_begin_(region_begin), lifted_(lifted) {}

  // The index into Partition::lifted of `v`, added on first read: a hoisted attribute, or a value
  // defined before the region that is not a boundary tensor. nullopt for anything else.
  std::optional<size_t> liftedOf(Value* v) {
    auto it = index_.find(v);
    if (it != index_.end()) return it->second;
    LiftedInput lifted{v, "", LiftedKind::Scalar};
    if (v->node()->kind() == prim::GetAttr) {
      lifted.name = attributePath(v);
      lifted.kind = attributeKind(v);
      // The same attribute read twice (inlined twice) is one lifted input.
      for (size_t k = 0; k < lifted_.size(); ++k) {
        if (lifted_[k].name == lifted.name && lifted_[k].value->node()->kind() == prim::GetAttr) {
          index_[v] = k;
          return k;
        }
      }
    } else if (!top_.isHoisted(v) && top_.definedAt(v) <= region_begin_) {
      // A model input or a value computed before the chain: a side tensor (a mask, position
      // embeddings), or a scalar, Optional[Tensor] or list.
      lifted.name = v->debugName();
      if (isTensor(v)) lifted.kind = LiftedKind::Side;
    } else {
      return std::nullopt;
    }
    index_[v] = lifted_.size();
    lifted_.push_back(lifted);
    return index_[v];
  }

  // The index of `v` when a stage has read it already.
  std::optional<size_t> find(Value* v) const {
    auto it = index_.find(v);
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }

 private:
  const TopLevelNodes& top_;
  const size_t region_begin_;
  std::vector<LiftedInput>& lifted_;
  std::unordered_map<Value*, size_t> index_;
};

// Fills a stage's graph: activation inputs, clones of the stage's nodes, outputs. Other values the
// clones read become lifted inputs, or clones of constants.
class StageGraphBuilder {
 public:
  StageGraphBuilder(Stage& stage, size_t s, LiftedInputs& lifted)
      : stage_(stage), g_(*stage.graph), s_(s), lifted_(lifted) {}

  void addActivationInputs(const std::vector<Value*>& live) {
    for (Value* v : live) addInput(v);
    stage_.num_activation_inputs = live.size();
  }

  // Each tensor list the boundary carries, built again from its elements (activation inputs).
  void rebuildLists(const std::vector<ListBoundary>& lists) {
    for (const ListBoundary& list : lists) {
      std::vector<Value*> elements;
      for (Value* e : list.elements) elements.push_back(map_.at(e));
      Node* construct =
          g_.createList(list.list->type()->expectRef<c10::ListType>().getElementType(), elements);
      g_.appendNode(construct);
      map_[list.list] = construct->output();
    }
  }

  void cloneNodes(const std::vector<Node*>& nodes, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      Node* copy = g_.createClone(nodes[i], [this](Value* v) { return env(v); });
      g_.appendNode(copy);
      for (size_t o = 0; o < nodes[i]->outputs().size(); ++o)
        map_[nodes[i]->output(o)] = copy->output(o);
      // Values defined inside nested blocks are mapped by createClone itself.
    }
  }

  void addOutputs(const std::vector<Value*>& live) {
    for (Value* v : live) g_.registerOutput(env(v));
  }

 private:
  Value* addInput(Value* v) {
    Value* input = g_.addInput();
    if (v->hasDebugName()) input->setDebugName(v->debugName());
    input->setType(v->type());
    map_[v] = input;
    return input;
  }

  Value* env(Value* v) {
    auto it = map_.find(v);
    if (it != map_.end()) return it->second;
    if (v->node()->kind() == prim::Constant) {
      Node* copy = g_.createClone(v->node(), [](Value*) -> Value* { return nullptr; });
      g_.prependNode(copy);
      map_[v] = copy->output();
      return copy->output();
    }
    auto lifted = lifted_.liftedOf(v);
    TORCH_CHECK(lifted, "partition: stage ", s_, " reads value %", v->debugName(),
                " that is neither a boundary tensor, an attribute, nor a value defined before the "
                "chain; please report this model");
    for (size_t k = 0; k < stage_.lifted.size(); ++k) {
      if (stage_.lifted[k] == *lifted) {
        map_[v] = g_.inputs()[stage_.num_activation_inputs + k];
        return map_[v];
      }
    }
    stage_.lifted.push_back(*lifted);
    return addInput(v);
  }

  Stage& stage_;
  Graph& g_;
  const size_t s_;
  LiftedInputs& lifted_;
  std::unordered_map<Value*, Value*> map_;
};

// Adds to mutated_lifted the lifted values that `top_node` or a node nested in it writes, directly
// or through a view (`self.buf[1] = ...`, `self.buf.view(-1).add_(...)`).
void addMutatedLifted(Stage& stage, Node* top_node, const LiftedInputs& lifted) {
  forEachNestedNode(top_node, [&](Node* n) {
    for (size_t a : directlyWrittenInputs(n)) {
      const auto k = lifted.find(aliasBase(n->input(a)));
      if (k && std::find(stage.mutated_lifted.begin(), stage.mutated_lifted.end(), *k) ==
                   stage.mutated_lifted.end()) {
        stage.mutated_lifted.push_back(*k);
      }
    }
  });
}

// In-place writes, judged in the method graph: a stage graph's inputs would all be assumed to
// alias each other, so BatchNorm's num_batches_tracked.add_ would look like a write to the
// activation.
void markWrites(Stage& stage, const TopLevelNodes& top, const Cut& in, const Cut& out,
                const LiftedInputs& lifted, const torch::jit::AliasDb& alias_db) {
  for (size_t i = in.position; i < out.position; ++i) {
    addMutatedLifted(stage, top.nodes[i], lifted);
    if (writesToActivation(top.nodes[i], torch::jit::ValueSet(in.live.begin(), in.live.end()), top,
                           alias_db)) {
      stage.writes_activation_input = true;
    }
  }
}

// Whether `v` may be forward's input, a view of it, or a tensor inside one (a list input).
bool mayBeForwardsInput(Value* v, Graph& graph, const torch::jit::AliasDb& alias_db) {
  for (size_t i = 1; i < graph.inputs().size(); ++i) {
    Value* input = graph.inputs()[i];
    const auto kind = input->type()->kind();
    const bool container = kind == c10::TypeKind::ListType || kind == c10::TypeKind::TupleType ||
                           kind == c10::TypeKind::DictType;
    if (alias_db.mayAlias(v, input) || (container && alias_db.mayContainAlias(v, input)))
      return true;
  }
  return false;
}

// A stage runs on a copy of the activation input it writes in place (recomputations must read
// the original); where that input is forward's own (the chain's input, or carried through the
// boundaries before it), the caller's tensor stays as it was.
void warnIfForwardWritesItsInput(Partition& partition, const TopLevelNodes& top,
                                 const std::vector<const Cut*>& chosen,
                                 const torch::jit::AliasDb& alias_db) {
  int stage = 0;
  for (size_t s = 0; s + 1 < chosen.size() && stage == 0; ++s) {
    for (Value* v : chosen[s]->live) {
      if (!mayBeForwardsInput(v, *partition.graph, alias_db)) continue;
      for (size_t i = chosen[s]->position; i < chosen[s + 1]->position && stage == 0; ++i) {
        if (writesToActivation(top.nodes[i], torch::jit::ValueSet{v}, top, alias_db))
          stage = static_cast<int>(s) + 1;
      }
    }
  }
  if (stage == 0) return;
  const std::string why =
      "forward writes its input in place in the chain's stage " + std::to_string(stage) +
      ": that stage runs on a copy, so that recomputations read the original, and the tensor "
      "passed to forward is left unchanged where the unmodified model changes it (outputs and "
      "gradients are the same); write it out of place (x = x.mul(2) for x.mul_(2)) if later code "
      "reads the input";
  partition.warnings.push_back(why);
}

// Label fallback for stages without parameters: the kind of its first heavy op.
void labelByFirstHeavyOp(Stage& stage, size_t s) {
  for (const Node* n : stage.graph->nodes()) {
    if (isHeavyOp(n) || (stage.label.empty() && n->kind().is_aten()))
      stage.label = n->kind().toUnqualString();
    if (isHeavyOp(n)) break;
  }
  if (stage.label.empty()) stage.label = "stage" + std::to_string(s);
}

// Stage s: the nodes between the boundaries `in` and `out`.
Stage buildStage(const TopLevelNodes& top, const Cut& in, const Cut& out, size_t s,
                 LiftedInputs& lifted, const torch::jit::AliasDb& alias_db) {
  Stage stage;
  stage.graph = std::make_shared<Graph>();
  StageGraphBuilder builder(stage, s, lifted);
  builder.addActivationInputs(in.live);
  builder.rebuildLists(in.lists);
  builder.cloneNodes(top.nodes, in.position, out.position);
  builder.addOutputs(out.live);
  markWrites(stage, top, in, out, lifted, alias_db);
  eliminateDeadCodeKeepingDraws(stage.graph);
  labelByFirstHeavyOp(stage, s);
  return stage;
}

}  // namespace

void buildStages(Partition& partition, const TopLevelNodes& top,
                 const std::vector<const Cut*>& chosen, const torch::jit::AliasDb& alias_db) {
  const size_t region_begin = chosen.front()->position, region_end = chosen.back()->position;
  LiftedInputs lifted(top, region_begin, partition.lifted);
  partition.first_node = top.nodes[region_begin];
  partition.last_node = top.nodes[region_end - 1];
  partition.chain_inputs = chosen.front()->live;
  partition.chain_outputs = chosen.back()->live;
  for (const ListBoundary& list : chosen.back()->lists)
    partition.chain_output_lists.push_back({list.list, list.elements});
  for (const Cut* c : chosen) partition.boundary_bytes.push_back(c->bytes);
  for (size_t s = 0; s + 1 < chosen.size(); ++s) {
    partition.stages.push_back(buildStage(top, *chosen[s], *chosen[s + 1], s, lifted, alias_db));
  }
  warnIfForwardWritesItsInput(partition, top, chosen, alias_db);
}

}  // namespace jitckpt::partition_steps
