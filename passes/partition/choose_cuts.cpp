// Step 8 of the partition pass: the granularity rule, max_stages, the single-stage fallback.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <unordered_set>

#include "passes/graph_walk.h"
#include "passes/partition/steps.h"

namespace jitckpt::partition_steps {
namespace {

// What choosing cut `c` costs: its bytes, twice when a later node writes its boundary in place
// and the runtime has to copy it.
int64_t cost(const Cut& c, bool move_off_writes) {
  return move_off_writes && c.written_later ? 2 * c.bytes : c.bytes;
}

// Whether `every_cut` offers kept[j], a cut of the gap [k, gap_end) other than its cheapest: not
// when a later node writes its boundary in place (the runtime would copy it), nor when the next
// cut of the gap carries the same tensors (only flags and shapes lie between them: a norm's
// input checks), so that each offered cut follows some work on tensors.
bool offeredBeside(const std::vector<Cut>& kept, size_t j, size_t gap_end, bool move_off_writes) {
  if (move_off_writes && kept[j].written_later) return false;
  return j + 1 >= gap_end || kept[j + 1].live != kept[j].live;
}

// Inner cuts: one per gap between two consecutive heavy ops (candidates with the same heavy-op
// count before them), none before the first or after the last heavy op; in each gap the cheapest
// cut, the latest of equals, and with `every_cut` the gap's other cuts that offeredBeside allows.
std::vector<const Cut*> cutPerGap(const std::vector<Cut>& kept, const HeavyOpCounts& heavy,
                                  bool move_off_writes, bool every_cut) {
  const size_t first = kept.front().position, last = kept.back().position;
  std::vector<const Cut*> chosen{&kept.front()};
  for (size_t k = 1; k + 1 < kept.size();) {
    size_t gap_end = k;
    while (gap_end + 1 < kept.size() &&
           heavy.before[kept[gap_end].position] == heavy.before[kept[k].position]) {
      ++gap_end;
    }
    const Cut* pick = &kept[k];
    for (size_t j = k; j < gap_end; ++j) {
      if (cost(kept[j], move_off_writes) <= cost(*pick, move_off_writes)) pick = &kept[j];
    }
    for (size_t j = k; j < gap_end; ++j) {
      const Cut* c = &kept[j];
      if (c != pick && !(every_cut && offeredBeside(kept, j, gap_end, move_off_writes))) continue;
      if (heavy.between(first, c->position) > 0 && heavy.between(c->position, last) > 0)
        chosen.push_back(c);
    }
    k = gap_end;
  }
  if (kept.size() > 1 && last > first) chosen.push_back(&kept.back());
  return chosen;
}

// Whether `c` carries a tensor that `earlier` carries too: the identity of a residual block, the
// residual stream of a transformer block, a skip. A chain input that `later` carries as well does
// not count: it passes by (a feature vector beside an image branch, an encoder-decoder's target
// ids beside its encoder) and would make every cut look carried on; nor does a carried flag
// (carryScalarsAsTensors), live at every cut from where it is computed to its last reader.
bool carriesOn(const Cut& c, const Cut& earlier, const Cut& later, const Cut& start,
               const std::unordered_set<const Value*>& carried_flags) {
  auto carries = [](const Cut& cut, const Value* v) {
    return std::find(cut.live.begin(), cut.live.end(), v) != cut.live.end();
  };
  for (const Value* v : c.live) {
    if (carried_flags.count(v)) continue;
    const bool passes_by = carries(start, v) && carries(later, v);
    if (carries(earlier, v) && !passes_by) return true;
  }
  return false;
}

// Drops runs of equal inner cuts that carry on a tensor of the cut before them and kHumpRatio
// times what either neighbour carries, the largest first, until none is left (see chooseCuts).
// A run whose neighbours enclose more than half of the chain's heavy ops stays: that is no block
// of a repeated structure but a skip around most of the model (`return x + body(x)`, as in
// denoising and super-resolution nets), and dropping it would leave the body one stage.
constexpr double kHumpRatio = 1.2;

std::vector<const Cut*> withoutHumps(std::vector<const Cut*> chosen, const HeavyOpCounts& heavy,
                                     const std::unordered_set<const Value*>& carried_flags) {
  const int total = heavy.between(chosen.front()->position, chosen.back()->position);
  while (true) {
    size_t worst_begin = 0, worst_end = 0;  // the run [begin, end) to drop
    for (size_t i = 1; i + 1 < chosen.size();) {
      size_t j = i;
      while (j + 2 < chosen.size() && chosen[j + 1]->bytes == chosen[i]->bytes) ++j;
      const int64_t b = chosen[i]->bytes;
      bool carried = true;
      for (size_t k = i; k <= j; ++k)
        carried = carried && carriesOn(*chosen[k], *chosen[i - 1], *chosen[j + 1], *chosen.front(),
                                       carried_flags);
      const int64_t neighbours = std::max(chosen[i - 1]->bytes, chosen[j + 1]->bytes);
      const bool local =
          2 * heavy.between(chosen[i - 1]->position, chosen[j + 1]->position) <= total;
      const bool hump = carried && local &&
                        static_cast<double>(b) >= kHumpRatio * static_cast<double>(neighbours);
      if (hump && (worst_end == 0 || b > chosen[worst_begin]->bytes)) {
        worst_begin = i;
        worst_end = j + 1;
      }
      i = j + 1;
    }
    if (worst_end == 0) return chosen;
    chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(worst_begin),
                 chosen.begin() + static_cast<std::ptrdiff_t>(worst_end));
  }
}

// At most max_stages: keeps the cuts that best balance the heavy-op count of the chain
// [first, last].
std::vector<const Cut*> balanceStages(const std::vector<const Cut*>& chosen, size_t first,
                                      size_t last, const HeavyOpCounts& heavy, int max_stages) {
  const int total = heavy.between(first, last);
  std::vector<const Cut*> balanced{chosen.front()};
  for (int s = 1; s < max_stages; ++s) {
    const double target = static_cast<double>(total) * s / max_stages;
    const Cut* best = nullptr;
    for (size_t k = 1; k + 1 < chosen.size(); ++k) {
      if (chosen[k]->position <= balanced.back()->position) continue;
      if (!best || std::abs(heavy.between(first, chosen[k]->position) - target) <
                       std::abs(heavy.between(first, best->position) - target)) {
        best = chosen[k];
      }
    }
    if (best) balanced.push_back(best);
  }
  balanced.push_back(chosen.back());
  return balanced;
}

}  // namespace

bool isHeavyOp(const Node* n) {
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
      if (isHeavyOp(inner)) return true;
    }
  }
  return false;
}

HeavyOpCounts countHeavyOps(const TopLevelNodes& top) {
  HeavyOpCounts heavy;
  heavy.before.assign(top.end + 1, 0);
  for (size_t i = 0; i < top.end; ++i) {
    heavy.before[i + 1] = heavy.before[i] + (isHeavyOp(top.nodes[i]) ? 1 : 0);
  }
  return heavy;
}

namespace {

size_t nestedHeavyOps(const Node* n) {
  size_t count = 0;
  forEachNestedNode(const_cast<Node*>(n), [&](Node* inner) {
    if (inner->blocks().empty() && isHeavyOp(inner)) ++count;
  });
  return count;
}

// Why a chain got one stage: where one `if` or loop holds several compute-heavy ops (layers run
// under `if self.use_layers:`), that statement, whose inside is never cut; else what crosses.
std::string singleStageReason(const TopLevelNodes& top, size_t first, size_t last) {
  const Node* holder = nullptr;
  size_t most = 1;
  for (size_t i = first; i < last; ++i) {
    const Node* n = top.nodes[i];
    if (n->blocks().empty()) continue;
    const size_t inside = nestedHeavyOps(n);
    if (inside > most) holder = n, most = inside;
  }
  size_t heavy = 0;
  for (size_t i = first; i < last; ++i) heavy += nestedHeavyOps(top.nodes[i]);
  if (heavy < 2) {
    return "it holds " + std::to_string(heavy) +
           " compute-heavy op(s) (convolution, linear, matmul, attention, embedding, recurrent "
           "layer), and cuts go only between two of them";
  }
  if (!holder) {
    return "it has no position between two compute-heavy ops where only tensors are live (a list, "
           "dict or object, or a value another branch may leave unset, crosses every one)";
  }
  std::string where;
  if (auto location = holder->sourceRange().file_line_col())
    where = " at " + std::get<0>(*location) + ":" + std::to_string(std::get<1>(*location));
  const bool loop = holder->kind() == c10::prim::Loop;
  return std::string("one ") + (loop ? "loop" : "`if`") + where + " holds " + std::to_string(most) +
         " compute-heavy ops, and the inside of " +
         (loop ? "a loop that TorchScript does not unroll" : "an `if`") + " is never cut" +
         (loop ? "; iterate over a ModuleList or a constant range"
               : "; for a setting fixed at construction, make it a constant (torch.jit.Final, "
                 "or a class constant in __constants__) so that TorchScript removes the `if`");
}

}  // namespace

std::vector<const Cut*> chooseCuts(const TopLevelNodes& top, const CandidateCuts& candidates,
                                   const HeavyOpCounts& heavy, const PartitionOptions& options,
                                   std::vector<std::string>& warnings) {
  const std::vector<Cut>& kept = candidates.cuts;
  const size_t first = kept.front().position, last = kept.back().position;
  std::vector<const Cut*> chosen =
      withoutHumps(cutPerGap(kept, heavy, options.move_cuts_off_inplace_writes, options.every_cut),
                   heavy, top.carried_flags);
  if (options.max_stages > 0 && chosen.size() > static_cast<size_t>(options.max_stages) + 1) {
    chosen = balanceStages(chosen, first, last, heavy, options.max_stages);
  }
  if (chosen.size() > 2 && heavy.between(first, last) != 0) return chosen;

  // No usable cut: the whole region between the first and last tensor-only positions is one
  // stage.
  TORCH_CHECK(first != last,
              "partition: forward has no two positions where only tensors (and tensor lists "
              "grown by append) are live, so there is no chain to checkpoint: a dict, object or "
              "other list lives from forward's start to its end, or forward is one operation; "
              "build such a value after the layers, or checkpoint the submodule that holds them");
  const std::string why =
      "no usable cut, so the chain is a single stage (checkpointing cannot save memory on it): " +
      singleStageReason(top, first, last);
  warnings.push_back(why);
  return {&kept.front(), &kept.back()};
}

}  // namespace jitckpt::partition_steps
