// Built-in and random chains.
#include "solver/testing/builtin_chains.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

namespace jitckpt::solver {
namespace {

struct Builder {
  Costs chain;
  explicit Builder(int64_t input_bytes) {
    chain.uf = {0};
    chain.ub = {0};
    chain.wa = {input_bytes};
    chain.wabar = {0};
    chain.wd = {input_bytes};
    chain.of = {0};
    chain.ob = {0};
  }
  void add(double gmacs, int64_t out, int64_t intermediates, int64_t workspace) {
    chain.uf.push_back(gmacs);
    chain.ub.push_back(2 * gmacs);
    chain.wa.push_back(out);
    chain.wabar.push_back(out + intermediates);
    chain.wd.push_back(out);
    chain.of.push_back(workspace);
    chain.ob.push_back(2 * workspace);
  }
};

constexpr int64_t kFloat = 4;

Costs resnetShaped(const int layers[4]) {
  const int64_t image = 224;
  Builder b(3 * image * image * kFloat);
  const int64_t stem = 112 * 112;
  b.add(3.0 * 64 * 49 * stem / 1e9, 64 * stem * kFloat, 0, 0);  // conv1 7x7/2
  b.add(64.0 * stem * 2 / 1e9, 64 * stem * kFloat, 0, 0);       // bn1
  b.add(64.0 * stem / 1e9, 64 * stem * kFloat, 0, 0);           // relu
  b.add(64.0 * 9 * 56 * 56 / 1e9, 64 * 56 * 56 * kFloat, 64 * 56 * 56 * kFloat / 8,
        0);  // maxpool (+indices)
  int64_t channels = 64, side = 56;
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t planes = 64 << layer;
    for (int block = 0; block < layers[layer]; ++block) {
      const int64_t in_side = side;
      if (block == 0 && layer > 0) side /= 2;
      const int64_t hw = side * side;
      const double macs =
          static_cast<double>(channels) * planes * in_side * in_side +  // 1x1 reduce
          9.0 * planes * planes * hw + 4.0 * planes * planes * hw +     // 3x3, 1x1 expand
          (block == 0 ? 4.0 * planes * channels * hw : 0.0);            // projection
      const int64_t out = 4 * planes * hw * kFloat;
      // conv1/bn1/relu at the input resolution, conv2/bn2/relu, conv3/bn3 (+ projection) outputs.
      const int64_t intermediates = (3 * planes * in_side * in_side + 3 * planes * hw +
                                     2 * 4 * planes * hw + (block == 0 ? 2 * 4 * planes * hw : 0)) *
                                    kFloat;
      b.add(macs / 1e9, out, intermediates, planes * hw * kFloat);
      channels = 4 * planes;
    }
  }
  b.add(static_cast<double>(channels) * side * side / 1e9, channels * kFloat, 0, 0);  // avgpool
  b.add(static_cast<double>(channels) * 1000 / 1e9, 1000 * kFloat, 0, 0);             // fc
  return b.chain;
}

}  // namespace

Costs resnet1001Costs() {
  const int layers[4] = {33, 99, 168, 33};
  return resnetShaped(layers);
}

Costs resnetLikeCosts(int blocks) {
  if (blocks < 4)
    throw std::invalid_argument("resnet-like chain needs at least 4 blocks (L >= 10)");
  const double share[4] = {33 / 333.0, 99 / 333.0, 168 / 333.0, 33 / 333.0};
  int layers[4];
  int used = 0;
  for (int i = 0; i < 3; ++i) {
    layers[i] = std::max(1, static_cast<int>(blocks * share[i] + 0.5));
    used += layers[i];
  }
  layers[3] = std::max(1, blocks - used);
  return resnetShaped(layers);
}

Costs builtinCosts(const std::string& name) {
  if (name == "resnet1001") return resnet1001Costs();
  const std::string prefix = "resnetlike:";
  if (name.rfind(prefix, 0) == 0) {
    int length = 0;
    try {
      length = std::stoi(name.substr(prefix.size()));
    } catch (const std::exception&) {
    }
    if (length >= 10) return resnetLikeCosts(length - 6);
  }
  throw std::invalid_argument("unknown built-in chain '" + name +
                              "': use resnet1001 or resnetlike:L with L >= 10");
}

Costs randomCosts(int length, uint64_t seed, int max_size, int max_time) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Costs c;
  c.uf = {0};
  c.ub = {0};
  c.wa = {uniform(0, max_size)};
  c.wabar = {0};
  c.wd = {uniform(0, max_size)};
  c.of = {0};
  c.ob = {0};
  for (int l = 1; l <= length; ++l) {
    c.uf.push_back(uniform(0, max_time));
    c.ub.push_back(uniform(0, max_time));
    const int a = uniform(0, max_size);
    c.wa.push_back(a);
    c.wabar.push_back(a + uniform(0, max_size));
    c.wd.push_back(uniform(0, max_size));
    c.of.push_back(uniform(0, 2));
    c.ob.push_back(uniform(0, 2));
  }
  // No-grad forwards at most as slow as recording ones, drawn apart so that the chains above
  // stay what they were for every seed.
  std::mt19937_64 nograd_rng(seed ^ 0x9e3779b97f4a7c15ULL);
  c.uf_nograd = {0};
  for (int l = 1; l <= length; ++l) {
    const int fall = static_cast<int>(c.uf[static_cast<size_t>(l)]);
    c.uf_nograd.push_back(std::uniform_int_distribution<int>(0, fall)(nograd_rng));
  }
  // The no-grad forwards' transient memory (Costs::of_nograd), drawn apart as well: the recording
  // forward's own for about a third of the stages, otherwise up to a whole activation (a no-grad
  // forward holds intermediates that a recording one counts in abar instead).
  std::mt19937_64 overhead_rng(seed ^ 0xc2b2ae3d27d4eb4fULL);
  c.of_nograd = {0};
  for (int l = 1; l <= length; ++l) {
    const int o = std::uniform_int_distribution<int>(-max_size / 2, max_size)(overhead_rng);
    c.of_nograd.push_back(o < 0 ? c.of[static_cast<size_t>(l)] : o);
  }
  // Parameter gradients, drawn apart too: none for about a third of the stages.
  std::mt19937_64 gradient_rng(seed ^ 0x2545f4914f6cdd1dULL);
  c.wg = {0};
  for (int l = 1; l <= length; ++l) {
    const int g = std::uniform_int_distribution<int>(-max_size / 2, max_size)(gradient_rng);
    c.wg.push_back(std::max(0, g));
  }
  // Tensors passed through (Costs::spans), drawn apart as well: from about a third of the
  // activations a span of 2 to 4 of them, holding part of what each has left unspanned.
  std::mt19937_64 pass_rng(seed ^ 0x85ebca6b0c2b2ae3ULL);
  std::vector<int64_t> free(c.wa.begin(), c.wa.end());
  for (int first = 0; first < length; ++first) {
    const int last = std::min(length, first + std::uniform_int_distribution<int>(1, 3)(pass_rng));
    int64_t room = free[static_cast<size_t>(first)];
    for (int l = first; l <= last; ++l) room = std::min(room, free[static_cast<size_t>(l)]);
    const int64_t bytes = std::uniform_int_distribution<int64_t>(-room, room)(pass_rng);
    if (bytes <= 0) continue;
    c.spans.push_back({first, last, bytes});
    for (int l = first; l <= last; ++l) free[static_cast<size_t>(l)] -= bytes;
  }
  // Gradients B(l) hands on (Costs::wd_handed), drawn apart: for about a third of the stages,
  // part of what delta^l and delta^{l-1} both are.
  std::mt19937_64 handed_rng(seed ^ 0x61c8864680b583ebULL);
  c.wd_handed = {0};
  for (int l = 1; l <= length; ++l) {
    const int64_t room = std::min(c.wd[static_cast<size_t>(l)], c.wd[static_cast<size_t>(l - 1)]);
    const int64_t h = std::uniform_int_distribution<int64_t>(-2 * room, room)(handed_rng);
    c.wd_handed.push_back(std::max<int64_t>(0, h));
  }
  // The caller's copy of a^{L-1} (Costs::held_output), drawn apart: for about half the chains of
  // two stages or more, any size up to twice that activation (what the caller keeps of a model's
  // output may be more or less than the chain's last boundary).
  std::mt19937_64 output_rng(seed ^ 0x165667b19e3779f9ULL);
  if (length >= 2) {
    const int64_t a = c.wa[static_cast<size_t>(length - 1)];
    c.held_output =
        std::max<int64_t>(0, std::uniform_int_distribution<int64_t>(-2 * a - 1, 2 * a)(output_rng));
  }
  return c;
}

Costs withLongSpans(Costs chain, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x27d4eb2f165667c5ULL);
  const int L = chain.length();
  std::vector<int64_t> free(chain.wa.begin(), chain.wa.end());
  chain.spans.clear();
  for (int first = 0; first < L; ++first) {
    const int last = std::uniform_int_distribution<int>(first + 1, L)(rng);
    int64_t bytes = free[static_cast<size_t>(first)];
    for (int l = first; l <= last; ++l) bytes = std::min(bytes, free[static_cast<size_t>(l)]);
    if (bytes <= 0) continue;
    chain.spans.push_back({first, last, bytes});
    for (int l = first; l <= last; ++l) free[static_cast<size_t>(l)] -= bytes;
  }
  return chain;
}

Costs withEmptyActivation(Costs chain, int l) {
  chain.wa[static_cast<size_t>(l)] = 0;
  chain.spans.erase(std::remove_if(chain.spans.begin(), chain.spans.end(),
                                   [l](const Span& s) { return s.first <= l && l <= s.last; }),
                    chain.spans.end());
  return chain;
}

}  // namespace jitckpt::solver
