// ChainSizes (see chain_sizes.h).
#include "solver/chain_sizes.h"

namespace jitckpt::solver {

ChainSizes::ChainSizes(const Costs& chain, int64_t unit_bytes, int64_t cap_units)
    : unit(unit_bytes), cap(cap_units), length(chain.length()) {
  const int L = length;
  auto units = [&](int64_t bytes) { return std::min(ceilDiv(bytes, unit), cap); };
  for (int l = 0; l <= L; ++l) {
    wa.push_back(units(chain.wa[l]));
    abar_own.push_back(units(chain.abarOwnBytes(l)));
    new_a.push_back(units(chain.wa[l] - chain.passedBytes(l)));
    wd.push_back(units(chain.wd[l]));
    of.push_back(units(chain.of[l]));
    of_nograd.push_back(units(chain.noGradForwardOverhead(l)));
    backward_added.push_back(l == 0 ? 0 : units(chain.backwardAddedBytes(l)));
  }
  gradient_bytes_before.assign(L + 2, 0);
  for (int l = 1; l <= L; ++l)
    gradient_bytes_before[l + 1] = gradient_bytes_before[l] + chain.gradientBytes(l);
  gradient_bytes_before[L + 1] += chain.held_output;
  terminal_gradients = units(chain.gradientBytes(L));
  // shared[j][k] (j < k): bytes of a^k that a^j holds, the spans over both.
  const size_t n = static_cast<size_t>(L) + 1;
  std::vector<int64_t> shared(n * n, 0);
  for (const Span& span : chain.spans) {
    for (int j = span.first; j < span.last; ++j) {
      for (int k = j + 1; k <= span.last; ++k) shared[j * n + k] += span.bytes;
    }
  }
  last_split_.assign(L + 2, L);
  for (int s = L; s >= 1; --s) last_split_[s] = chain.runsOnce(s) ? s : last_split_[s + 1];
  kept_.assign(n * n, 0);
  for (size_t j = 0; j < n; ++j) {
    for (size_t k = j + 1; k < n; ++k) kept_[j * n + k] = units(chain.wa[k] - shared[j * n + k]);
  }
}

// Summed in bytes, then rounded up once: a sum of rounded terms would charge up to one unit per
// stage too much.
int64_t ChainSizes::gradients(int first, int last) const {
  if (first > last) return 0;
  return std::min(ceilDiv(gradient_bytes_before[last + 1] - gradient_bytes_before[first], unit),
                  cap);
}

}  // namespace jitckpt::solver
