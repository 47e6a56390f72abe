// Costs cost model of the paper (section 3, Table 1): per-stage times and sizes, with JSON I/O.
// Standard C++ only. Sizes are bytes (or any integer unit), times any consistent unit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jitckpt::solver {

// A chain of L stages numbered 1..L, exactly as in the paper. Every vector has L+1 entries and
// entry l describes stage l. Entry 0 is meaningful only for wa (the chain input a^0) and wd (the
// gradient delta^0 of the chain input); it is 0 for the others.
//
// When the chain stands for a model cut into stages, the caller appends a terminal stage L+1 with
// every cost 0 except wd[L] = size of the chain output gradient: its Fall/B mark the hand-off to
// autograd (the forward returns a^L; delta^L arrives from the loss), as F^{L+1}/B^{L+1} do in the
// paper.
//
// Extension of the paper's model: a forward that records the autograd graph (Fall) and one that
// does not (Fck, F∅) take different times (saving tensors for backward costs allocations and
// bookkeeping), so uf is Fall's time and uf_nograd, when given, that of Fck and F∅. The simulator,
// the persistent DP and the exhaustive searches all charge each operation its own time, so the DP
// stays exactly optimal under the simulator. Without uf_nograd both are uf, as in the paper.
// Their transient memory differs too, the other way round: a forward without recording frees each
// intermediate tensor once the next op has read it, so its peak above its output (of_nograd) may be
// several intermediates, while a recording forward keeps them in abar (counted there) and peaks
// only by a kernel's workspace above it (of). Each forward kind is charged its own overhead;
// charging every forward the larger of the two over-counted a recomputed Fall by their difference.
// Without of_nograd both are of, as in the paper.
//
// Second extension: B(l) also produces the gradients of the parameters stage l reads, and they
// stay allocated until the whole chain's backward ends (they reach autograd, and .grad, with the
// chain input's gradient). wg[l] is what B(l) leaves held that way: after B(l), wg[l..L] are all
// held. ob[l] covers B(l)'s own gradients (it holds them at its end). Without wg (the paper's
// model), gradients are not counted.
//
// Third extension: a stage may pass tensors of its input through to its output unchanged (an
// Inception block's input, read by each branch stage in turn; DenseNet's feature list). Such a
// storage is held by every activation from the one whose stage made it to the last that passes it
// on: a Span (first, last, bytes), first < last. passedBytes(l) is what a^l holds of a^{l-1}.
// Whenever abar^l is held, so is a^{l-1} (in some form: B(l) reads it, and every schedule keeps it
// until then), so abar^l costs only what stage l allocated, wabar[l] - passedBytes(l)
// (abarOwnBytes); counting the shared storages again in every stage that forwards them
// over-counted a chain of n such stages n times. Lone activations (checkpoints) share them too,
// but only copies of one run: a stage run again makes new copies of what it made and passes on
// those of its input. The simulator follows the copies for any sequence; in a persistent schedule
// every activation held beside a sub-chain's input a^j was computed from it, so a lone a^k there
// costs wa[k] - sharedBytes(j, k). Without spans, nothing is shared.
// Fourth extension: the caller of a model chain keeps the chain's output (the terminal stage's
// input a^{L-1}) to the end of the step: `output = model(x); loss_fn(output, y).backward()` holds
// `output` through the whole backward. held_output is its bytes. Until B(L) the activation a^{L-1}
// holds it. From B(L) on it is counted apart, beside every activation and gradient, where B(L)
// consumed a lone a^{L-1}; where abar^{L-1} was held (Fall(L-1) ran, so abar^{L-1} holds that very
// copy), from B(L-1) on. A stage recomputed after B(L) makes a copy of its own. Without it (0, the
// paper's model) the output goes when B(L) has read it. Where the output passes on storages of
// earlier activations (spans over L-1), they are counted again, the safe side.
// Fifth extension: a gradient B(l) hands on unchanged (the gradient of an input stage l passes
// through), or a slice of one (cat's backward hands each input a slice of its gradient), is a
// storage delta^l and delta^{l-1} both hold: wd counts it in each (what each keeps alive), and
// wd_handed[l] says how much of delta^{l-1} is delta^l's, so that B(l), which holds both at
// once, charges it once (backwardAddedBytes). Without it, nothing is handed on.
// Storages that consecutive activations hold: every a^l with first <= l <= last holds `bytes` of
// them (the same copies when each was computed from the one before).
struct Span {
  int first = 0, last = 0;
  int64_t bytes = 0;
  bool operator==(const Span& o) const {
    return first == o.first && last == o.last && bytes == o.bytes;
  }
};

struct Costs {
  std::vector<double> uf;          // forward time of stage l, recording (Fall)
  std::vector<double> uf_nograd;   // forward time without recording (Fck, F∅); empty: uf
  std::vector<double> ub;          // backward time of stage l
  std::vector<int64_t> wa;         // size of a^l (wa[0]: chain input)
  std::vector<int64_t> wabar;      // size of abar^l: all that B^l needs, a^l included
  std::vector<int64_t> wd;         // size of delta^l (wd[0]: input gradient)
  std::vector<int64_t> of;         // Fall's overhead: its peak minus its inputs and abar^l
  std::vector<int64_t> of_nograd;  // Fck's and F∅'s: their peak minus inputs and a^l; empty: of
  std::vector<int64_t> ob;         // backward overhead
  std::vector<int64_t> wg;         // parameter gradients B(l) leaves held; empty: none
  std::vector<int64_t> wd_handed;  // bytes of delta^{l-1} that delta^l holds; empty: none
  std::vector<Span> spans;         // storages held by consecutive activations; empty: none
  int64_t held_output = 0;         // bytes of a^{L-1} the caller keeps to the end; 0: none
  std::vector<int> runs_once;      // stages whose forward runs once, ascending; empty: none

  int length() const { return static_cast<int>(uf.size()) - 1; }  // L
  // The time of Fck(l) and F∅(l).
  double noGradForward(int l) const {
    return uf_nograd.empty() ? uf[static_cast<size_t>(l)] : uf_nograd[static_cast<size_t>(l)];
  }
  // The transient memory of Fck(l) and F∅(l).
  int64_t noGradForwardOverhead(int l) const {
    return of_nograd.empty() ? of[static_cast<size_t>(l)] : of_nograd[static_cast<size_t>(l)];
  }
  int64_t gradientBytes(int l) const { return wg.empty() ? 0 : wg[static_cast<size_t>(l)]; }
  int64_t handedBytes(int l) const {
    return wd_handed.empty() ? 0 : wd_handed[static_cast<size_t>(l)];
  }
  // What B(l) adds beside delta^l at its peak: the part of delta^{l-1} it makes, and ob[l].
  int64_t backwardAddedBytes(int l) const {
    return wd[static_cast<size_t>(l - 1)] - handedBytes(l) + ob[static_cast<size_t>(l)];
  }
  // Bytes of a^k that a^j holds (j < k), as the spans over both (and every activation between)
  // say. O(number of spans): callers that ask often table it (ChainSizes).
  int64_t sharedBytes(int j, int k) const;
  int64_t passedBytes(int l) const { return l < 1 ? 0 : sharedBytes(l - 1, l); }
  // What holding abar^l adds beside a^{l-1}, which is held whenever abar^l is.
  int64_t abarOwnBytes(int l) const { return wabar[static_cast<size_t>(l)] - passedBytes(l); }
  bool runsOnce(int l) const;
};

// The costs of one chain profiled twice, on data that gives its tensors other sizes (boolean
// masks, nonzero): each size the larger of the two, each part that activations or gradients
// share the smaller (spans only where both have them), each time the larger; every schedule's
// simulated peak under them is at least its peak under either. Throws std::invalid_argument when
// the two are not of the same length.
Costs largestOf(const Costs& a, const Costs& b);

// Throws std::invalid_argument naming the field and the stage when the chain is not well formed
// (empty, vectors of different lengths, negative values, wabar < wa, a span outside 0..L or
// shorter than two activations, spans over a^l holding more than wa[l], wd_handed[l] above wd[l]
// or wd[l-1], held_output negative or given for a chain of one stage, runs_once not ascending
// stages of 1..L).
void validate(const Costs& chain);

// JSON form: {"uf":[...], "ub":[...], "wa":[...], "wabar":[...], "wd":[...], "of":[...],
// "ob":[...]} with L+1 entries each (entry 0 as above), and optionally "uf_nograd", "of_nograd",
// "wg", "wd_handed", "spans" ([[first, last, bytes], ...]), "held_output" (bytes) and
// "runs_once" ([stage, ...]). Files of
// earlier versions may give "wpass" instead ([l]: bytes of a^l that a^{l-1} holds; read as spans
// over l-1 and l). Errors name the field and the stage.
Costs costsFromJson(const std::string& text);
std::string costsToJson(const Costs& chain);
Costs readCostsFile(const std::string& path);
void writeCostsFile(const Costs& chain, const std::string& path);

}  // namespace jitckpt::solver
