// The persistent DP's inner loops and row memory (see dp_kernels.h).
#include "solver/dp_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#ifdef __linux__
#include <sys/mman.h>
#endif

// The 8-float vectors below pass only between always-inlined helpers: no ABI is involved.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace jitckpt::solver::detail {
namespace {

// AVX2 where the processor has it (an AVX-512 clone measured no faster on this loop).
#define JITCKPT_CLONES __attribute__((target_clones("avx2", "default")))

// Sixteen floats as two halves of GCC's 8-float vector extension (an AVX2 register each, two SSE
// halves in the default clone); the compiler does not vectorize early-exit loops on its own. The
// helpers are always inlined, so that each clone computes them with its own instructions: called
// (unoptimized builds), a helper compiled for the default target would pass the vectors another
// way than the AVX2 clone expects.
typedef float Vec8 __attribute__((vector_size(32)));
struct Vec16 {
  Vec8 low, high;
};
#define JITCKPT_INLINE inline __attribute__((always_inline))
JITCKPT_INLINE Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v.low, p, sizeof v.low);
  std::memcpy(&v.high, p + 8, sizeof v.high);
  return v;
}
JITCKPT_INLINE void store16(float* p, const Vec16& v) {
  std::memcpy(p, &v.low, sizeof v.low);
  std::memcpy(p + 8, &v.high, sizeof v.high);
}
JITCKPT_INLINE Vec8 min8(Vec8 a, Vec8 b) { return a < b ? a : b; }

}  // namespace

// Each split's fields are read and its run relaxed in one pass: built into an array first and
// read back by a second loop, they cost a store and a load per split.
JITCKPT_CLONES void relaxSplits(float* __restrict out, const SplitBase* __restrict bases,
                                const StoredRow* __restrict right_rows,
                                const int* __restrict gradients, int count, int delta, int S) {
  for (int i = 0; i < count; ++i) {
    const SplitBase& b = bases[i];
    const StoredRow right = right_rows[i];
    const int right_offset = b.shift + right.first;       // a^{s'-1} beside (s', t)
    const int left_offset = gradients[i] + b.left_first;  // (s, s'-1) beside the gradients of s'..t
    const int lo = std::max({std::min(delta + b.sweep, S + 1), right_offset, left_offset});
    if (lo > S) continue;
    const Vec8 c = Vec8{} + b.c;
    const float bound = checkpointValue(b.c, right.min, b.left_min);
    const float* r_end = right.data + (right.end - right.first);
    const float* l_end = b.left + b.left_width;
    const float* r = std::min(right.data + (lo - right_offset), r_end);
    const float* l = std::min(b.left + (lo - left_offset), l_end);
    for (float* o = out + lo; *o > bound; o += kBlock) {
      const Vec16 rv = load16(r);
      const Vec16 lv = load16(l);
      const Vec16 ov = load16(o);
      // checkpointValue's order of sums, so that backtracking finds the same floats
      store16(o, {min8((c + rv.low) + lv.low, ov.low), min8((c + rv.high) + lv.high, ov.high)});
      r = std::min(r + kBlock, r_end);
      l = std::min(l + kBlock, l_end);
    }
  }
}

JITCKPT_CLONES void relaxAll(float* __restrict out, const float* __restrict sub, int sub_offset,
                             float c, float sub_min, int lo, int split_at, int S) {
  for (int m = lo; m < split_at; ++m) {
    const float v = allValue(c, sub[m - sub_offset]);
    out[m] = v < out[m] ? v : out[m];
  }
  const float tail = allValue(c, sub_min);
  for (int m = std::max(lo, split_at); m <= S; ++m) out[m] = tail < out[m] ? tail : out[m];
}

constexpr size_t kHugePage = size_t{2} << 20;
// A large table is tens of MB written once: faulted in 4 KB pages, that took an eighth of its
// build.
std::unique_ptr<float[], void (*)(void*)> allocateRowChunk(size_t floats) {
  const size_t bytes = (floats * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage;
  if (floats * sizeof(float) < kHugePage) {
    void* memory = std::malloc(floats * sizeof(float));
    if (memory == nullptr) throw std::bad_alloc();
    return {static_cast<float*>(memory), std::free};
  }
  void* memory = std::aligned_alloc(kHugePage, bytes);
  if (memory == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(memory, bytes, MADV_HUGEPAGE);  // a hint: without it, ordinary pages
#endif
  return {static_cast<float*>(memory), std::free};
}

}  // namespace jitckpt::solver::detail
