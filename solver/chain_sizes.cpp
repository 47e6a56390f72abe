// ChainSizes (see chain_sizes.h).
#include "solver/chain_sizes.h"

namespace jitckpt::solver {

ChainSizes::ChainSizes(const Costs& chain, int64_t unit_bytes, int64_t cap_units)
    : unit(unit_bytes), cap(cap_units) {
  const int L = chain.length();
  auto units = [&](int64_t bytes) { return std::min(ceilDiv(bytes, unit), cap); };
  for (int l = 0; l <= L; ++l) {
    wa.push_back(units(chain.wa[l]));
    abar_own.push_back(units(chain.abarOwnBytes(l)));
    wd.push_back(units(chain.wd[l]));
    of.push_back(units(chain.of[l]));
    of_nograd.push_back(units(chain.noGradForwardOverhead(l)));
    ob.push_back(units(chain.ob[l]));
  }
  gradient_bytes_before.assign(L + 2, 0);
  for (int l = 1; l <= L; ++l)
    gradient_bytes_before[l + 1] = gradient_bytes_before[l] + chain.gradientBytes(l);
}

// Summed in bytes, then rounded up once: a sum of rounded terms would charge up to one unit per
// stage too much.
int64_t ChainSizes::gradients(int first, int last) const {
  if (first > last) return 0;
  return std::min(ceilDiv(gradient_bytes_before[last + 1] - gradient_bytes_before[first], unit),
                  cap);
}

}  // namespace jitckpt::solver
