// Partition pass: inlined forward graph -> chain of standalone stage graphs (see partition.h).
//
// 1. Hoist: every prim::GetAttr chain from `self` (in nested blocks too) and every constant moves
//    to the front of the graph. Attribute values become the chain's lifted inputs; constants are
//    cloned into the stages that use them.
// 2. Cuts: a position between two top-level nodes is a valid cut when every value live across it
//    (defined before, used after) is a tensor, apart from lifted values and immutable scalars
//    defined before the chain. Nested blocks are never split: they are single top-level nodes.
//    Only cuts carrying the fewest tensors are kept (one in CNNs, so never inside a residual block
//    where the identity is live too; the mask and the hidden state in transformers).
// 3. Granularity rule: a stage holds at least one heavy op (convolution, linear, matmul, ...;
//    norms, activations and pooling are not heavy), and at most one cut sits in each gap between
//    two consecutive heavy ops: the latest one, just before the next heavy op, so the norm,
//    activation and pooling that follow a layer stay in its stage. In a ResNet the only
//    one-tensor cuts are between blocks, which gives one stage per residual block plus the stem
//    and the classifier. `max_stages` then keeps the cuts that best balance the heavy-op count.
// 4. In-place writes: a cut whose boundary a later node writes in place (relu_, add_) is replaced
//    by the latest unwritten cut of the same gap when one exists; otherwise it stays and the stage
//    that writes is marked `writes_activation_input`, so the runtime copies its input and the
//    stored checkpoint is never corrupted. Writes are judged with AliasDb in the method graph, so
//    a write through a view or alias of a boundary tensor counts too. Writes to attributes
//    (BatchNorm running statistics, num_batches_tracked) are not activation writes: they are
//    listed in Stage::mutated_lifted.
// 5. Views: a boundary tensor may be a view of an earlier, otherwise dead tensor; it is kept as is
//    (its checkpoint keeps the base storage alive, so its size is a lower bound) and writes through
//    any alias are caught by step 4. Two boundary tensors that alias each other are each counted.
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

// Heavy ops carry the compute and the parameters of a layer; every stage holds at least one.
bool isAnchor(const Node* n) {
  static const std::unordered_set<std::string> kinds = {"aten::_convolution",
                                                        "aten::conv1d",
                                                        "aten::conv2d",
                                                        "aten::conv3d",
                                                        "aten::convolution",
                                                        "aten::conv_transpose1d",
                                                        "aten::conv_transpose2d",
                                                        "aten::conv_transpose3d",
                                                        "aten::linear",
                                                        "aten::matmul",
                                                        "aten::mm",
                                                        "aten::bmm",
                                                        "aten::addmm",
                                                        "aten::baddbmm",
                                                        "aten::embedding",
                                                        "aten::lstm",
                                                        "aten::gru",
                                                        "aten::rnn_tanh",
                                                        "aten::rnn_relu",
                                                        "aten::scaled_dot_product_attention",
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
      const bool from_self =
          cur->kind() == prim::GetAttr &&
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

// Whether `n` or a node nested in it writes in place a tensor that may alias one of `values`.
// Writes to attributes (running statistics, num_batches_tracked) are left out: attributes are
// lifted, never activations, yet AliasDb keeps them in the wildcard set together with every
// tensor that was stored in a list (DenseNet's feature list), so writesToAlias would flag every
// BatchNorm in such a model. Nodes without a schema fall back to AliasDb's answer.
bool writesToActivation(Node* n, const torch::jit::ValueSet& values,
                        const torch::jit::AliasDb& alias_db) {
  if (!n->blocks().empty()) {
    for (auto* block : n->blocks()) {
      for (Node* inner : block->nodes()) {
        if (writesToActivation(inner, values, alias_db)) return true;
      }
    }
    return false;
  }
  if (!n->maybeSchema()) return alias_db.writesToAlias(n, values);
  for (size_t a : directlyWrittenInputs(n)) {
    Value* written = n->input(a);
    if (written->node()->kind() == prim::GetAttr) continue;
    for (const Value* v : values) {
      if (alias_db.mayAlias(written, v)) return true;
    }
  }
  return false;
}

struct Cut {
  size_t position;             // index into `nodes`: the cut is before nodes[position]
  std::vector<Value*> live;    // boundary tensors, in a stable order
  bool written_later = false;  // a later node writes a boundary tensor in place
};

// Stage labels from the modules whose parameters a stage reads: their common attribute path
// ("layer1.0" for a ResNet block), or, when that path is empty or not unique to the stage
// (DenseNet's "features"), the range of its children that the stage covers
// ("features.denseblock1..transition1", "conv1..bn1" for a ResNet stem).
void labelStagesByModule(Partition& partition) {
  auto split = [](const std::string& path) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
      parts.push_back(path.substr(start, dot - start));
    }
    parts.push_back(path.substr(start));
    return parts;
  };
  auto join = [](const std::vector<std::string>& parts, size_t count) {
    std::string path;
    for (size_t i = 0; i < count; ++i) path += (i ? "." : "") + parts[i];
    return path;
  };
  std::vector<std::vector<std::vector<std::string>>> owners(partition.stages.size());
  for (size_t s = 0; s < partition.stages.size(); ++s) {
    for (size_t k : partition.stages[s].lifted) {
      if (partition.lifted[k].kind != LiftedKind::Parameter) continue;
      auto parts = split(partition.lifted[k].name);
      parts.pop_back();  // "weight", "bias"
      if (!parts.empty()) owners[s].push_back(parts);
    }
  }
  auto isUnder = [](const std::vector<std::string>& path, const std::vector<std::string>& prefix,
                    size_t n) {
    return path.size() >= n && std::equal(prefix.begin(), prefix.begin() + n, path.begin());
  };
  for (size_t s = 0; s < owners.size(); ++s) {
    if (owners[s].empty()) continue;
    const auto& head = owners[s].front();
    size_t common = head.size();
    for (const auto& o : owners[s]) {
      size_t c = 0;
      while (c < common && c < o.size() && o[c] == head[c]) ++c;
      common = c;
    }
    bool unique = common > 0;
    for (size_t t = 0; t < owners.size() && unique; ++t) {
      if (t == s) continue;
      for (const auto& o : owners[t]) unique = unique && !isUnder(o, head, common);
    }
    if (unique) {
      partition.stages[s].label = join(head, common);
      continue;
    }
    const auto& tail = owners[s].back();
    std::string label = join(head, std::min(common + 1, head.size()));
    if (tail.size() > common && tail[common] != head[std::min(common, head.size() - 1)]) {
      label += ".." + tail[common];
    }
    partition.stages[s].label = label;
  }
}

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
    return v == self ||
           ((v->node()->kind() == prim::GetAttr || v->node()->kind() == prim::Constant) &&
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
      c.written_later = writesToActivation(
          nodes[i], torch::jit::ValueSet(c.live.begin(), c.live.end()), alias_db);
    }
  }

  TORCH_CHECK(!kept.empty(),
              "partition: no position in forward has only tensors live; "
              "jitckpt needs a tensor flowing through the model");
  // Anchor counts between positions.
  std::vector<int> anchors_before(end + 1, 0);
  for (size_t i = 0; i < end; ++i)
    anchors_before[i + 1] = anchors_before[i] + (isAnchor(nodes[i]) ? 1 : 0);
  auto anchorsBetween = [&](size_t a, size_t b) { return anchors_before[b] - anchors_before[a]; };

  // The chain spans from the first to the last kept cut. Inner cuts: one per gap between two
  // consecutive heavy ops (kept cuts with the same heavy-op count before them), none before the
  // first or after the last heavy op; in each gap the latest cut, or with
  // move_cuts_off_inplace_writes the latest one whose boundary is never written in place.
  const size_t first = kept.front().position, last = kept.back().position;
  std::vector<const Cut*> chosen{&kept.front()};
  for (size_t k = 1; k + 1 < kept.size();) {
    size_t gap_end = k;
    while (gap_end + 1 < kept.size() &&
           anchors_before[kept[gap_end].position] == anchors_before[kept[k].position]) {
      ++gap_end;
    }
    const Cut* pick = &kept[gap_end - 1];
    if (options.move_cuts_off_inplace_writes) {
      for (size_t j = k; j < gap_end; ++j) {
        if (!kept[j].written_later) pick = &kept[j];
      }
    }
    if (anchorsBetween(first, pick->position) > 0 && anchorsBetween(pick->position, last) > 0) {
      chosen.push_back(pick);
    }
    k = gap_end;
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
    // No usable cut: the whole region between the first and last tensor-only positions is one
    // stage.
    chosen = {&kept.front(), &kept.back()};
    if (first == last) {
      TORCH_CHECK(false,
                  "partition: forward has no two positions where only tensors are live, so "
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
        if (partition.lifted[k].name == lifted.name &&
            partition.lifted[k].value->node()->kind() == prim::GetAttr) {
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
      TORCH_CHECK(
          lifted, "partition: stage ", s, " reads value %", v->debugName(),
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
      for (size_t o = 0; o < nodes[i]->outputs().size(); ++o)
        map[nodes[i]->output(o)] = copy->output(o);
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
      if (writesToActivation(nodes[i], torch::jit::ValueSet(in.live.begin(), in.live.end()),
                             alias_db)) {
        stage.writes_activation_input = true;
      }
    }
    torch::jit::EliminateDeadCode(stage.graph);
    // Label fallback for stages without parameters: the kind of its first heavy op.
    for (const Node* n : g.nodes()) {
      if (isAnchor(n) || (stage.label.empty() && n->kind().is_aten()))
        stage.label = n->kind().toUnqualString();
      if (isAnchor(n)) break;
    }
    if (stage.label.empty()) stage.label = "stage" + std::to_string(s);
    partition.stages.push_back(std::move(stage));
  }
  labelStagesByModule(partition);
  return partition;
}

void inlineAllCalls(Graph& graph) {
  // With graph executor optimization off (torch.jit.optimized_execution(False)), Inline inlines
  // one level only, because callees' graphs are not pre-inlined: repeat until no call is left.
  auto hasCalls = [](const torch::jit::Block* block) {
    std::vector<const torch::jit::Block*> blocks{block};
    while (!blocks.empty()) {
      const auto* b = blocks.back();
      blocks.pop_back();
      for (const Node* n : b->nodes()) {
        if (n->kind() == prim::CallMethod || n->kind() == prim::CallFunction) return true;
        for (const auto* inner : n->blocks()) blocks.push_back(inner);
      }
    }
    return false;
  };
  for (int level = 0; level < 64 && hasCalls(graph.block()); ++level) torch::jit::Inline(graph);
}

Partition partitionModule(const torch::jit::Module& module, const PartitionOptions& options) {
  auto method = module.find_method("forward");
  TORCH_CHECK(method, "partition: the module has no forward method");
  auto graph = method->graph()->copy();
  inlineAllCalls(*graph);
  return partitionGraph(graph, options);
}

}  // namespace jitckpt
