// The memory limit of a chain (activations, and parameter gradients where the costs have them),
// the one type every layer uses: bytes, a fraction of the unconstrained peak (the no-checkpointing
// schedule's), unlimited, the smallest limit that works ("min"), or what the device has available
// when the plan is made ("auto"). Parsed from "2GiB", "512MiB", "1.5GB", "1000000" (bytes), "0.5"
// or "50%" (fraction), "none", "min", "auto"; printed back. Min and Auto are resolved by the solve
// step, which knows the chain and the device. Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace jitckpt::solver {

struct MemoryLimit {
  enum class Kind { Bytes, Fraction, Unlimited, Min, Auto } kind = Kind::Unlimited;
  double value = 0;  // bytes, or the fraction

  static MemoryLimit bytes(int64_t b) { return {Kind::Bytes, static_cast<double>(b)}; }
  static MemoryLimit fraction(double f) { return {Kind::Fraction, f}; }
  static MemoryLimit unlimited() { return {}; }
  static MemoryLimit min() { return {Kind::Min, 0}; }
  static MemoryLimit autoLimit() { return {Kind::Auto, 0}; }
  // Throws std::invalid_argument saying what is accepted.
  static MemoryLimit parse(const std::string& text);

  // Bytes for a given unconstrained peak; INT64_MAX when unlimited. Min and Auto: throws
  // std::logic_error (the solve step resolves them).
  int64_t resolve(int64_t unconstrained_peak) const;
  // "2.00 GiB", "50%", "none", "min", "auto".
  std::string toString() const;
  // Exact text that parse() reads back: "2147483648B", "0.5", "none", "min", "auto".
  std::string toText() const;
};

// "1.50 GiB", "512.00 MiB", "312 B".
std::string formatBytes(int64_t bytes);

}  // namespace jitckpt::solver
