// Partition pass: inlined forward graph -> chain of standalone stage graphs (see partition.h).
//
// 1. Hoist: every prim::GetAttr chain from `self` (in nested blocks too) and every constant moves
//    to the front of the graph. Attribute values become the chain's lifted inputs; constants are
//    cloned into the stages that use them.
// 2. Cuts: a position between two top-level nodes is a valid cut when every value live across it
//    (defined before, used after) is a tensor, apart from lifted values and immutable scalars
//    defined before the chain. Nested blocks are never split: they are single top-level nodes.
//    Only cuts carrying the fewest tensors are kept (one in CNNs; the mask and the hidden state
//    in transformers).
// 3. Granularity: a stage must hold at least one "anchor" op (convolution, matmul, norm, pool,
//    ...), so that a lone relu never becomes a stage; optionally at most `max_stages`, balanced by
//    anchor count. Cuts whose boundary is later written in place (relu_, add_) are skipped when
//    another cut can take their place; if one must stay, the stage that writes is marked
//    `writes_activation_input` and the runtime copies its input before running it.
#include "passes/partition.h"

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace jitckpt {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;
namespace prim = c10::prim;
namespace aten = c10::aten;

bool isTensor(const Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; }

// Immutable non-tensor values that can be handed to the chain op as lifted scalars.
bool isImmutableScalar(const Value* v) {
  switch (v->type()->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::NoneType:
    case c10::TypeKind::DeviceObjType:
      return true;
    default:
      return false;
  }
}

bool isAnchor(const Node* n) {
  static const std::unordered_set<std::string> kinds = {
      "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
      "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d", "aten::linear",
      "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm", "aten::batch_norm",
      "aten::layer_norm", "aten::group_norm", "aten::instance_norm", "aten::max_pool2d",
      "aten::avg_pool2d", "aten::adaptive_avg_pool2d", "aten::max_pool1d", "aten::max_pool3d",
      "aten::embedding", "aten::lstm", "aten::gru", "aten::scaled_dot_product_attention",
      "aten::einsum"};
  if (kinds.count(n->kind().toQualString())) return true;
  for (const auto* block : n->blocks()) {
    for (const Node* inner : block->nodes()) {
      if (isAnchor(inner)) return true;
    }
  }
  return false;
}

// The top-level node that contains `n` (itself when top-level).
Node* topLevelOwner(Node* n, const torch::jit::Block* top) {
  while (n->owningBlock() != top) n = n->owningBlock()->owningNode();
  return n;
}

// Attribute path of a GetAttr chain: "layer1.0.bn1.weight".
std::string attributePath(const Value* v) {
  std::vector<std::string> names;
  const Node* n = v->node();
  while (n->kind() == prim::GetAttr) {
    names.push_back(n->s(c10::attr::name));
    n = n->input(0)->node();
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) path += (path.empty() ? "" : ".") + *it;
  return path;
}

bool isTensorOrOptionalTensor(const Value* v) {
  if (isTensor(v)) return true;
  const auto optional = v->type()->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::TensorType;
}

LiftedKind attributeKind(const Value* v) {
  if (!isTensorOrOptionalTensor(v)) return LiftedKind::Scalar;
  const Node* n = v->node();
  const auto cls = n->input(0)->type()->cast<c10::ClassType>();
  if (cls) {
    const auto slot = cls->findAttributeSlot(n->s(c10::attr::name));
    if (slot && cls->is_parameter(*slot)) return LiftedKind::Parameter;
    if (slot && !isTensor(v) && !cls->is_buffer(*slot)) return LiftedKind::Scalar;
  }
  return LiftedKind::Buffer;
}

// Moves GetAttr chains (from any block) and constants to the front, in dependency order.
void hoistAttributesAndConstants(Graph& graph) {
  TORCH_CHECK(!graph.inputs().empty(), "partition: the graph has no inputs; expected `self` first");
  for (const Node* n : graph.block()->nodes()) {
    TORCH_CHECK(n->kind() != prim::CallMethod && n->kind() != prim::CallFunction,
                "partition: the graph is not inlined (found ", n->kind().toQualString(),
                "); run torch::jit::Inline first, or use partitionModule");
  }
  std::vector<Node*> movable;
  std::unordered_set<const Value*> attribute_values;
  for (Node* n : graph.block()->nodes()) {
    // depth-first over nested blocks
    std::vector<Node*> stack{n};
    while (!stack.empty()) {
      Node* cur = stack.back();
      stack.pop_back();
      if (cur->kind() == prim::SetAttr) {
        TORCH_CHECK(false, "partition: forward assigns attribute '", cur->s(c10::attr::name),
                    "' (prim::SetAttr); jitckpt cannot lift attributes that forward changes. "
                    "Move the assignment out of forward");
      }
      const bool from_self = cur->kind() == prim::GetAttr &&
                             (cur->input(0) == graph.inputs()[0] || attribute_values.count(cur->input(0)));
      if (from_self) attribute_values.insert(cur->output());
      if (from_self || (cur->kind() == prim::Constant && cur->owningBlock() == graph.block())) {
        movable.push_back(cur);
      }
      for (auto* b : cur->blocks()) {
        for (auto it = b->nodes().rbegin(); it != b->nodes().rend(); ++it) stack.push_back(*it);
      }
    }
  }
  Node* insert_after = graph.param_node();
  for (Node* n : movable) {
    // GetAttr inputs are `self` or earlier GetAttrs, already moved: order is preserved.
    n->moveAfter(insert_after);
    insert_after = n;
  }
}

// Inputs that a node writes in place: arguments annotated (a!) in its schema, and the running
// statistics of the norm ops, which write them without saying so in their schema.
std::vector<size_t> directlyWrittenInputs(const Node* n) {
  std::vector<size_t> written;
  const std::string kind = n->kind().toQualString();
  if (kind == "aten::batch_norm" || kind == "aten::instance_norm") return {3, 4};
  const auto* schema = n->maybeSchema();
  if (!schema) return written;
  for (size_t a = 0; a < schema->arguments().size() && a < n->inputs().size(); ++a) {
    const auto* alias = schema->arguments()[a].alias_info();
    if (alias && alias->isWrite()) written.push_back(a);
  }
  return written;
}

struct Cut {
  size_t position;            // index into `nodes`: the cut is before nodes[position]
  std::vector<Value*> live;   // boundary tensors, in a stable order
  bool written_later = false; // a later node writes a boundary tensor in place
};

}  // namespace

Partition partitionGraph(std::shared_ptr<Graph> graph, const PartitionOptions& options) {
  TORCH_CHECK(graph, "partition: null graph");
  hoistAttributesAndConstants(*graph);
  torch::jit::AliasDb alias_db(graph);
  torch::jit::Block* top = graph->block();
  Value* self = graph->inputs()[0];

  std::vector<Node*> nodes;
  bool in_prefix = true;  // the hoisted GetAttr/Constant prefix
  for (Node* n : top->nodes()) {
    if (in_prefix && (n->kind() == prim::GetAttr || n->kind() == prim::Constant)) continue;
    in_prefix = false;
    nodes.push_back(n);
  }
  std::unordered_map<const Node*, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;
  const size_t end = nodes.size();  // position of the return node

  auto isHoisted = [&](const Value* v) {
    return v == self || ((v->node()->kind() == prim::GetAttr || v->node()->kind() == prim::Constant) &&
                         v->node()->owningBlock() == top && !index.count(v->node()));
  };
  // Last top-level position that uses each value (end for the return node).
  auto lastUse = [&](const Value* v) {
    size_t last = 0;
    for (const auto& use : v->uses()) {
      Node* owner = topLevelOwner(use.user, top);
      last = std::max(last, owner == top->return_node() ? end : index.at(owner));
    }
    return last;
  };
  // Defined position: graph inputs at 0 (before nodes[0]), node outputs at index + 1.
  auto definedAt = [&](const Value* v) -> size_t {
    return v->node() == graph->param_node() ? 0 : index.at(v->node()) + 1;
  };

  // Candidate values that can cross cuts: graph inputs and top-level node outputs.
  std::vector<Value*> values;
  for (Value* v : graph->inputs()) {
    if (v != self) values.push_back(v);
  }
  for (Node* n : nodes) {
    for (Value* v : n->outputs()) values.push_back(v);
  }
  std::vector<std::pair<size_t, size_t>> ranges;  // [defined, last use) per value
  for (Value* v : values) ranges.push_back({definedAt(v), v->uses().empty() ? 0 : lastUse(v)});

  // A value crosses the cut before nodes[pos] when it is defined at or before pos and used by
  // nodes[pos] or later. The chain starts at the first position where only tensors and immutable
  // scalars cross; scalars defined by then are lifted, and any other non-tensor makes a cut
  // invalid.
  std::vector<Cut> cuts;
  std::optional<size_t> chain_start;
  for (size_t pos = 0; pos <= end; ++pos) {
    Cut cut{pos, {}, false};
    bool valid = true;
    for (size_t k = 0; k < values.size() && valid; ++k) {
      Value* v = values[k];
      if (v->uses().empty() || isHoisted(v)) continue;
      if (!(ranges[k].first <= pos && pos <= ranges[k].second)) continue;
      if (isTensor(v)) {
        cut.live.push_back(v);
      } else if (!isImmutableScalar(v) || (chain_start && ranges[k].first > *chain_start)) {
        valid = false;
      }
    }
    if (!valid || cut.live.empty()) continue;
    if (!chain_start) chain_start = pos;
    cuts.push_back(std::move(cut));
  }
  Partition partition;
  partition.graph = graph;
  auto warnOnce = [&](const std::string& why) {
    partition.warnings.push_back(why);
    TORCH_WARN_ONCE("jitckpt partition: ", why);
  };

  // Keep only cuts with the fewest tensors, counted over the inner cuts: the ends may carry fewer
  // (a mask dropped at the end) or more (two inputs merged by the first op).
  size_t fewest = SIZE_MAX;
  for (size_t k = 1; k + 1 < cuts.size(); ++k) fewest = std::min(fewest, cuts[k].live.size());
  if (fewest == SIZE_MAX) {
    for (const Cut& c : cuts) fewest = std::min(fewest, c.live.size());
  }
  std::vector<Cut> kept;
  for (Cut& c : cuts) {
    if (c.live.size() <= fewest) kept.push_back(std::move(c));
  }
  for (Cut& c : kept) {
    for (size_t i = c.position; i < end && !c.written_later; ++i) {
      c.written_later = alias_db.writesToAlias(nodes[i], torch::jit::ValueSet(c.live.begin(), c.live.end()));
    }
  }

  TORCH_CHECK(!kept.empty(), "partition: no position in forward has only tensors live; "
              "jitckpt needs a tensor flowing through the model");
  // Anchor counts between positions.
  std::vector<int> anchors_before(end + 1, 0);
  for (size_t i = 0; i < end; ++i) anchors_before[i + 1] = anchors_before[i] + (isAnchor(nodes[i]) ? 1 : 0);
  auto anchorsBetween = [&](size_t a, size_t b) { return anchors_before[b] - anchors_before[a]; };

  // The chain spans from the first to the last kept cut; choose inner cuts greedily.
  const size_t first = kept.front().position, last = kept.back().position;
  std::vector<const Cut*> chosen{&kept.front()};
  for (size_t k = 1; k + 1 < kept.size(); ++k) {
    const Cut& c = kept[k];
    if (anchorsBetween(chosen.back()->position, c.position) == 0) continue;
    if (anchorsBetween(c.position, last) == 0) continue;
    if (c.written_later && options.move_cuts_off_inplace_writes) {
      // Prefer a later cut in the same gap (before the next anchor) that is not written.
      bool replaced = false;
      for (size_t j = k + 1; j + 1 < kept.size() && anchorsBetween(c.position, kept[j].position) == 0; ++j) {
        if (!kept[j].written_later) {
          replaced = true;
          break;
        }
      }
      if (replaced) continue;
    }
    chosen.push_back(&c);
  }
  if (kept.size() > 1 && last > first) chosen.push_back(&kept.back());

  // At most max_stages: keep the cuts that best balance the anchor count.
  if (options.max_stages > 0 && chosen.size() > static_cast<size_t>(options.max_stages) + 1) {
    const int total = anchorsBetween(first, last);
    std::vector<const Cut*> balanced{chosen.front()};
    for (int s = 1; s < options.max_stages; ++s) {
      const double target = static_cast<double>(total) * s / options.max_stages;
      const Cut* best = nullptr;
      for (size_t k = 1; k + 1 < chosen.size(); ++k) {
        if (chosen[k]->position <= balanced.back()->position) continue;
        if (!best || std::abs(anchorsBetween(first, chosen[k]->position) - target) <
                         std::abs(anchorsBetween(first, best->position) - target)) {
          best = chosen[k];
        }
      }
      if (best) balanced.push_back(best);
    }
    balanced.push_back(chosen.back());
    chosen = balanced;
  }

  if (chosen.size() <= 2 || anchorsBetween(first, last) == 0) {
    // No usable cut: the whole region between the first and last tensor-only positions is one stage.
    chosen = {&kept.front(), &kept.back()};
    if (first == last) {
      TORCH_CHECK(false, "partition: forward has no two positions where only tensors are live, so "
                  "there is no chain to checkpoint (is forward a single operation?)");
    }
    warnOnce("no usable cut: no position inside the chain carries only " + std::to_string(fewest) +
             " tensor(s) between two compute-heavy ops, so the chain has a single stage "
             "(checkpointing cannot save memory on it)");
  }

  // Lifted inputs: every hoisted attribute or prologue scalar that the chain region reads.
  const size_t region_begin = chosen.front()->position, region_end = chosen.back()->position;
  std::unordered_map<Value*, size_t> lifted_index;
  auto liftedOf = [&](Value* v) -> std::optional<size_t> {
    auto it = lifted_index.find(v);
    if (it != lifted_index.end()) return it->second;
    LiftedInput lifted{v, "", LiftedKind::Scalar};
    if (v->node()->kind() == prim::GetAttr) {
      lifted.name = attributePath(v);
      lifted.kind = attributeKind(v);
      // The same attribute read twice (inlined twice) is one lifted input.
      for (size_t k = 0; k < partition.lifted.size(); ++k) {
        if (partition.lifted[k].name == lifted.name && partition.lifted[k].value->node()->kind() == prim::GetAttr) {
          lifted_index[v] = k;
          return k;
        }
      }
    } else if (!isTensor(v) && !isHoisted(v) && definedAt(v) <= region_begin) {
      lifted.name = v->debugName();
    } else {
      return std::nullopt;
    }
    lifted_index[v] = partition.lifted.size();
    partition.lifted.push_back(lifted);
    return lifted_index[v];
  };

  partition.first_node = nodes[region_begin];
  partition.last_node = nodes[region_end - 1];
  partition.chain_inputs = chosen.front()->live;
  partition.chain_outputs = chosen.back()->live;

  for (size_t s = 0; s + 1 < chosen.size(); ++s) {
    const Cut& in = *chosen[s];
    const Cut& out = *chosen[s + 1];
    Stage stage;
    stage.graph = std::make_shared<Graph>();
    Graph& g = *stage.graph;
    std::unordered_map<Value*, Value*> map;
    for (Value* v : in.live) {
      Value* input = g.addInput();
      if (v->hasDebugName()) input->setDebugName(v->debugName());
      input->setType(v->type());
      map[v] = input;
    }
    stage.num_activation_inputs = in.live.size();
    std::vector<std::pair<size_t, Value*>> lifted_inputs;
    auto env = [&](Value* v) -> Value* {
      auto it = map.find(v);
      if (it != map.end()) return it->second;
      if (v->node()->kind() == prim::Constant) {
        Node* copy = g.createClone(v->node(), [](Value*) -> Value* { return nullptr; });
        g.prependNode(copy);
        map[v] = copy->output();
        return copy->output();
      }
      auto lifted = liftedOf(v);
      TORCH_CHECK(lifted, "partition: stage ", s, " reads value %", v->debugName(),
                  " that is neither a boundary tensor, an attribute, nor a scalar defined before the "
                  "chain; please report this model");
      for (size_t k = 0; k < stage.lifted.size(); ++k) {
        if (stage.lifted[k] == *lifted) {
          map[v] = g.inputs()[stage.num_activation_inputs + k];
          return map[v];
        }
      }
      Value* input = g.addInput();
      if (v->hasDebugName()) input->setDebugName(v->debugName());
      input->setType(v->type());
      stage.lifted.push_back(*lifted);
      map[v] = input;
      return input;
    };
    for (size_t i = in.position; i < out.position; ++i) {
      Node* copy = g.createClone(nodes[i], env);
      g.appendNode(copy);
      for (size_t o = 0; o < nodes[i]->outputs().size(); ++o) map[nodes[i]->output(o)] = copy->output(o);
      // Values defined inside nested blocks are mapped by createClone itself.
    }
    for (Value* v : out.live) g.registerOutput(env(v));
    // In-place writes, judged in the method graph: a stage graph's inputs would all be assumed to
    // alias each other, so BatchNorm's num_batches_tracked.add_ would look like a write to the
    // activation.
    for (size_t i = in.position; i < out.position; ++i) {
      std::vector<Node*> stack{nodes[i]};
      while (!stack.empty()) {
        Node* n = stack.back();
        stack.pop_back();
        for (auto* b : n->blocks()) {
          for (Node* inner : b->nodes()) stack.push_back(inner);
        }
        for (size_t a : directlyWrittenInputs(n)) {
          auto it = lifted_index.find(n->input(a));
          if (it != lifted_index.end() &&
              std::find(stage.mutated_lifted.begin(), stage.mutated_lifted.end(), it->second) ==
                  stage.mutated_lifted.end()) {
            stage.mutated_lifted.push_back(it->second);
          }
        }
      }
      if (alias_db.writesToAlias(nodes[i], torch::jit::ValueSet(in.live.begin(), in.live.end()))) {
        stage.writes_activation_input = true;
      }
    }
    torch::jit::EliminateDeadCode(stage.graph);
    // Label: the module path shared by the stage's parameters, else its anchor ops.
    std::string label;
    for (size_t k : stage.lifted) {
      const LiftedInput& l = partition.lifted[k];
      if (l.kind != LiftedKind::Parameter) continue;
      const auto dot = l.name.rfind('.');
      std::string owner = dot == std::string::npos ? l.name : l.name.substr(0, dot);
      if (label.empty()) {
        label = owner;
      } else {
        size_t common = 0;
        while (common < label.size() && common < owner.size() && label[common] == owner[common]) ++common;
        label = label.substr(0, common);
        while (!label.empty() && (label.back() == '.' || label.back() == '_')) label.pop_back();
      }
    }
    if (label.empty()) {
      for (const Node* n : g.nodes()) {
        if (isAnchor(n) || n->kind().is_aten()) {
          label = n->kind().toUnqualString();
          if (isAnchor(n)) break;
        }
      }
    }
    stage.label = label.empty() ? "stage" + std::to_string(s) : label;
    partition.stages.push_back(std::move(stage));
  }
  return partition;
}

Partition partitionModule(const torch::jit::Module& module, const PartitionOptions& options) {
  auto method = module.find_method("forward");
  TORCH_CHECK(method, "partition: the module has no forward method");
  auto graph = method->graph()->copy();
  torch::jit::Inline(*graph);
  return partitionGraph(graph, options);
}

}  // namespace jitckpt
