// Parsing and printing of memory sizes and limits: "2GiB", "512MiB", "1.5GB", "1000000" (bytes),
// "0.5" or "50%" (a fraction of a reference peak), "none". Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace jitckpt::solver {

struct MemorySpec {
  enum class Kind { Bytes, Fraction, Unlimited } kind = Kind::Unlimited;
  double value = 0;  // bytes, or the fraction
  // Bytes for a given reference peak (the unconstrained activation peak).
  int64_t resolve(int64_t reference_peak) const;
};

// Throws std::invalid_argument saying what is accepted.
MemorySpec parseMemorySpec(const std::string& text);

// "1.50 GiB", "512.00 MiB", "312 B".
std::string formatBytes(int64_t bytes);

}  // namespace jitckpt::solver
