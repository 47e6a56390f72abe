// Cost fit: a chain's costs at input sizes it was not profiled on, from its profiles at others.
// Takes samples (each profile's input sizes, flattened, and its Costs, all of one chain) and the
// target sizes; returns the predicted Costs, or nothing where the samples cannot say.
//
// Every size that varies must vary as one (a sequence length read in several shapes, or a batch):
// each byte count is then, op by op, a polynomial of degree at most two in it (attention scores
// are quadratic in the length). A byte count is predicted where one quadratic gives every sample
// exactly, from at least kMinSamples of them, at most the samples' span beyond their range (a
// new length beyond the first ones costs a solve, not a profile); a count no quadratic gives that
// never rises from one sampled size to a larger one (a kernel's workspace chosen by a threshold) is
// bounded by its largest sample, at sizes not below the smallest sampled; a stage's overhead no
// quadratic gives (the largest of its ops' transients, which one op overtakes from another), at
// sizes between the samples, by the largest sampled from the size below up; outside the samples'
// sizes, an overhead only where it does not fall toward the target between the two sizes nearest
// it (one that falls there may be overtaken just beyond by one that grows), and at least the
// nearest size's. Times are fitted by
// least squares. Nothing is predicted where the structure differs between samples (spans, stages
// that run once) or another count grows but is no quadratic (allocator blocks).
// Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "solver/costs.h"

namespace jitckpt::solver {

constexpr size_t kMinSamples = 4;  // three coefficients, and one more to check them

struct CostSample {
  std::vector<int64_t> sizes;  // every input size, flattened in one order for all samples
  const Costs* costs = nullptr;
};

// rounded_sizes: the byte counts are rounded up to an allocator's blocks (CUDA's, 512 bytes), so
// that a quadratic exact at the samples may be short elsewhere; then only a target whose varying
// size is congruent to the samples' modulo the greatest common divisor of their differences is
// predicted (lengths padded to a multiple of 8 or 16, say), where the blocks round alike.
std::optional<Costs> predictCosts(const std::vector<CostSample>& samples,
                                  const std::vector<int64_t>& target, bool rounded_sizes = false);

// Times for `measured`, whose sizes were profiled without timing: the sample's of the same
// chain whose activations weigh most like its own, each stage's scaled by how much more it holds
// (abar^l), which grows with its work. Throws std::invalid_argument unless the sample has the
// same number of stages.
void scaleTimes(const std::vector<CostSample>& samples, Costs& measured);

}  // namespace jitckpt::solver
