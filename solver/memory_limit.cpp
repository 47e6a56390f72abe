// MemoryLimit: parse, resolve, print (see memory_limit.h).
#include "solver/memory_limit.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <utility>

namespace jitckpt::solver {

int64_t MemoryLimit::resolve(int64_t unconstrained_peak) const {
  switch (kind) {
    case Kind::Bytes:
      return static_cast<int64_t>(value);
    case Kind::Fraction:
      return static_cast<int64_t>(std::floor(value * static_cast<double>(unconstrained_peak)));
    case Kind::Unlimited:
      return std::numeric_limits<int64_t>::max();
    case Kind::Min:
    case Kind::Auto:
      break;
  }
  throw std::logic_error("memory limit '" + toText() +
                         "' depends on the chain and the device: the solve step resolves it");
}

MemoryLimit MemoryLimit::parse(const std::string& text) {
  const std::string accepted =
      "give bytes (\"2GiB\", \"512MiB\", \"1.5GB\", \"1000000\"), a fraction of the unconstrained "
      "activation peak (\"0.5\", \"50%\"), \"none\", \"min\" (the smallest limit that works) or "
      "\"auto\" (what the device has available)";
  // Lower case, without the spaces around it; a space may part the number from its unit ("512 MiB")
  // but not split the number ("1 9 5 0" is no 1950).
  auto isSpace = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  std::string s;
  for (char c : text) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), isSpace));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), isSpace).base(), s.end());
  if (s.empty()) throw std::invalid_argument("empty memory limit: " + accepted);
  if (s == "none" || s == "unlimited" || s == "inf") return {};
  if (s == "min") return min();
  if (s == "auto") return autoLimit();
  // A decimal number, then its unit: strtod alone would also take hexadecimal ("0x100") and "nan".
  const size_t split = std::min(s.find_first_not_of("0123456789.e+-"), s.size());
  const std::string digits = s.substr(0, split);
  std::string unit = s.substr(split);
  unit.erase(unit.begin(), std::find_if_not(unit.begin(), unit.end(), isSpace));
  char* end = nullptr;
  const double number = std::strtod(digits.c_str(), &end);
  if (digits.empty() || end != digits.c_str() + digits.size() || !std::isfinite(number) ||
      number <= 0) {
    throw std::invalid_argument("memory limit '" + text +
                                "' is not a positive number: " + accepted);
  }
  if (unit == "%") {
    if (number > 100) throw std::invalid_argument("memory limit '" + text + "' is over 100%");
    return {Kind::Fraction, number / 100};
  }
  static const std::pair<const char*, double> units[] = {{"", 1},
                                                         {"b", 1},
                                                         {"kb", 1e3},
                                                         {"mb", 1e6},
                                                         {"gb", 1e9},
                                                         {"tb", 1e12},
                                                         {"kib", 1024.0},
                                                         {"mib", 1048576.0},
                                                         {"gib", 1073741824.0},
                                                         {"tib", 1099511627776.0}};
  for (const auto& [name, scale] : units) {
    if (unit != name) continue;
    // A bare number up to 1 is a fraction of the unconstrained peak; a larger one is bytes, and
    // then whole: "1.5" is a mistake, not 2 bytes.
    if (unit.empty() && number <= 1) return {Kind::Fraction, number};
    if (unit.empty() && number != std::floor(number)) {
      throw std::invalid_argument("memory limit '" + text +
                                  "' is neither a fraction (at most 1) nor a whole number of "
                                  "bytes: " +
                                  accepted);
    }
    if (unit == "b" && number != std::floor(number))
      throw std::invalid_argument("memory limit '" + text + "' is not a whole number of bytes");
    const double bytes = std::round(number * scale);
    if (bytes < 1) throw std::invalid_argument("memory limit '" + text + "' is less than one byte");
    // Bytes are held as int64: anything from 2^63 on would wrap around.
    if (bytes >= 9.2e18) {
      throw std::invalid_argument("memory limit '" + text +
                                  "' is more than 8 EiB; give \"none\" for no limit");
    }
    return {Kind::Bytes, bytes};
  }
  throw std::invalid_argument("memory limit '" + text + "' has an unknown unit '" + unit +
                              "': use B, KB, MB, GB, KiB, MiB, GiB or %");
}

std::string MemoryLimit::toString() const {
  switch (kind) {
    case Kind::Bytes:
      return formatBytes(static_cast<int64_t>(value));
    case Kind::Fraction: {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%g%%", value * 100);
      return buffer;
    }
    case Kind::Unlimited:
      return "none";
    case Kind::Min:
      return "min";
    case Kind::Auto:
      return "auto";
  }
  return "?";
}

std::string MemoryLimit::toText() const {
  char buffer[40];
  switch (kind) {
    case Kind::Bytes:
      std::snprintf(buffer, sizeof buffer, "%.0fB", value);
      return buffer;
    case Kind::Fraction:
      std::snprintf(buffer, sizeof buffer, "%.17g", value);
      return buffer;
    case Kind::Unlimited:
    case Kind::Min:
    case Kind::Auto:
      return toString();
  }
  return "none";
}

std::string formatBytes(int64_t bytes) {
  static const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::fabs(value) >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  char buffer[64];
  if (unit == 0)
    std::snprintf(buffer, sizeof buffer, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buffer, sizeof buffer, "%.2f %s", value, names[unit]);
  return buffer;
}

}  // namespace jitckpt::solver
