// Costs cost model: validation and JSON I/O (nlohmann::json).
#include "solver/costs.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace jitckpt::solver {
namespace {

using Json = nlohmann::json;

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

template <typename T>
void checkNonNegative(const std::vector<T>& values, const char* field) {
  for (size_t l = 0; l < values.size(); ++l) {
    if (!(values[l] >= 0)) {
      std::ostringstream os;
      os << "chain field '" << field << "' at stage " << l << " is " << values[l]
         << ": sizes and times must be non-negative";
      fail(os.str());
    }
  }
}

template <typename T>
std::vector<T> readField(const Json& json, const char* field) {
  if (!json.contains(field)) {
    fail(std::string("chain file has no field '") + field +
         "': give uf, ub, wa, wabar, wd, of, ob as arrays of L+1 numbers");
  }
  const Json& array = json.at(field);
  if (!array.is_array())
    fail(std::string("chain field '") + field + "' must be an array of numbers");
  std::vector<T> values;
  for (size_t l = 0; l < array.size(); ++l) {
    const Json& v = array[l];
    const bool ok =
        std::is_integral_v<T>
            ? v.is_number_integer() ||
                  (v.is_number_float() &&
                   v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
            : v.is_number();
    if (!ok) {
      std::ostringstream os;
      os << "chain field '" << field << "' at stage " << l << " is " << v.dump() << ": expected "
         << (std::is_integral_v<T> ? "an integer number of bytes" : "a number");
      fail(os.str());
    }
    values.push_back(v.get<T>());
  }
  return values;
}

// A gradient handed on by B(l) is part of both delta^l and delta^{l-1}.
void validateHanded(const Costs& chain) {
  for (int l = 0; l < static_cast<int>(chain.wd_handed.size()); ++l) {
    const int64_t handed = chain.wd_handed[static_cast<size_t>(l)];
    if (handed == 0) continue;
    if (l == 0 || handed > chain.wd[static_cast<size_t>(l)] ||
        handed > chain.wd[static_cast<size_t>(l - 1)]) {
      std::ostringstream os;
      os << "chain field 'wd_handed' at stage " << l << " is " << handed
         << ": it must be 0 at stage 0 and at most wd[l] and wd[l-1] (it is part of both)";
      fail(os.str());
    }
  }
}

// Spans lie within 0..L, cover at least two activations, and hold no more of a^l than wa[l].
void validateSpans(const Costs& chain) {
  const int L = chain.length();
  std::vector<int64_t> covered(static_cast<size_t>(L) + 1, 0);
  for (size_t i = 0; i < chain.spans.size(); ++i) {
    const Span& span = chain.spans[i];
    if (span.first < 0 || span.last > L || span.first >= span.last || span.bytes < 0) {
      std::ostringstream os;
      os << "chain field 'spans' entry " << i << " is [" << span.first << ", " << span.last << ", "
         << span.bytes << "]: a span is [first, last, bytes] with 0 <= first < last <= L (" << L
         << ") and bytes >= 0";
      fail(os.str());
    }
    for (int l = span.first; l <= span.last; ++l) covered[static_cast<size_t>(l)] += span.bytes;
  }
  for (int l = 0; l <= L; ++l) {
    if (covered[static_cast<size_t>(l)] > chain.wa[static_cast<size_t>(l)]) {
      std::ostringstream os;
      os << "chain field 'spans' holds " << covered[static_cast<size_t>(l)] << " bytes of a^" << l
         << ", more than wa[" << l << "] (" << chain.wa[static_cast<size_t>(l)] << ")";
      fail(os.str());
    }
  }
}

// The legacy field "wpass" ([l]: bytes of a^l that a^{l-1} holds) as spans. What a^l passes on
// comes first from what its own stage made (a span from l), then from the spans that reach it,
// latest first: where wpass[l] + wpass[l+1] > wa[l], that many bytes are in all three activations.
std::vector<Span> spansOfPassed(const std::vector<int64_t>& wpass, const std::vector<int64_t>& wa) {
  if (wpass.size() != wa.size()) {
    fail("chain field 'wpass' has " + std::to_string(wpass.size()) + " entries but 'wa' has " +
         std::to_string(wa.size()) + ": every field needs L+1 entries");
  }
  checkNonNegative(wpass, "wpass");
  if (!wpass.empty() && wpass[0] != 0)
    fail("chain field 'wpass' at stage 0 is " + std::to_string(wpass[0]) +
         ": the chain input passes nothing through, give 0");
  std::vector<Span> spans;  // those that reach the activation before the current one come last
  for (size_t l = 1; l < wpass.size(); ++l) {
    if (wpass[l] > wa[l] || wpass[l] > wa[l - 1]) {
      std::ostringstream os;
      os << "chain field 'wpass' at stage " << l << " is " << wpass[l] << ", more than wa[" << l
         << "] (" << wa[l] << ") or wa[" << l - 1 << "] (" << wa[l - 1] << "): it is the part of a^"
         << l << " that a^" << l - 1 << " holds";
      fail(os.str());
    }
    const int before = static_cast<int>(l) - 1;
    std::vector<size_t> reaching;  // spans that end at l-1, latest start first
    int64_t spanned = 0;
    for (size_t i = spans.size(); i-- > 0;) {
      if (spans[i].last == before) {
        reaching.push_back(i);
        spanned += spans[i].bytes;
      }
    }
    int64_t rest = wpass[l];
    const int64_t own = std::min(rest, wa[l - 1] - spanned);
    for (size_t i : reaching) {
      if (rest <= own) break;
      const int64_t taken = std::min(spans[i].bytes, rest - own);
      spans[i].bytes -= taken;
      spans.push_back({spans[i].first, static_cast<int>(l), taken});
      rest -= taken;
    }
    if (own > 0) spans.push_back({before, static_cast<int>(l), own});
  }
  spans.erase(
      std::remove_if(spans.begin(), spans.end(), [](const Span& s) { return s.bytes == 0; }),
      spans.end());
  return spans;
}

std::vector<Span> readSpans(const Json& json) {
  const Json& array = json.at("spans");
  if (!array.is_array()) fail("chain field 'spans' must be an array of [first, last, bytes]");
  std::vector<Span> spans;
  for (size_t i = 0; i < array.size(); ++i) {
    const Json& v = array[i];
    if (!v.is_array() || v.size() != 3 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
        !v[2].is_number_integer()) {
      fail("chain field 'spans' entry " + std::to_string(i) + " is " + v.dump() +
           ": expected [first, last, bytes], three integers");
    }
    spans.push_back({v[0].get<int>(), v[1].get<int>(), v[2].get<int64_t>()});
  }
  return spans;
}

}  // namespace

int64_t Costs::sharedBytes(int j, int k) const {
  int64_t bytes = 0;
  for (const Span& span : spans) {
    if (span.first <= j && span.last >= k) bytes += span.bytes;
  }
  return bytes;
}

bool Costs::runsOnce(int l) const {
  return std::binary_search(runs_once.begin(), runs_once.end(), l);
}

namespace {

// Entry-wise max (or min) of two optional fields, an empty one standing for `fallback`'s values
// (uf for uf_nograd, of for of_nograd) or for zeros; empty where both are.
template <typename T, typename Pick>
std::vector<T> combined(const std::vector<T>& a, const std::vector<T>& a_fallback,
                        const std::vector<T>& b, const std::vector<T>& b_fallback, Pick pick) {
  if (a.empty() && b.empty()) return {};
  const std::vector<T>& x = a.empty() ? a_fallback : a;
  const std::vector<T>& y = b.empty() ? b_fallback : b;
  std::vector<T> out(x.size());
  for (size_t l = 0; l < out.size(); ++l) out[l] = pick(x[l], y[l]);
  return out;
}

}  // namespace

Costs largestOf(const Costs& a, const Costs& b) {
  validate(a);
  validate(b);
  if (a.length() != b.length())
    fail("largestOf: chains of " + std::to_string(a.length()) + " and " +
         std::to_string(b.length()) + " stages");
  auto larger = [](auto x, auto y) { return std::max(x, y); };
  auto smaller = [](auto x, auto y) { return std::min(x, y); };
  const std::vector<int64_t> zeros(a.uf.size(), 0);
  Costs c;
  c.uf = combined(a.uf, a.uf, b.uf, b.uf, larger);
  c.uf_nograd = combined(a.uf_nograd, a.uf, b.uf_nograd, b.uf, larger);
  c.ub = combined(a.ub, a.ub, b.ub, b.ub, larger);
  c.wa = combined(a.wa, a.wa, b.wa, b.wa, larger);
  c.wabar = combined(a.wabar, a.wabar, b.wabar, b.wabar, larger);
  c.wd = combined(a.wd, a.wd, b.wd, b.wd, larger);
  c.of = combined(a.of, a.of, b.of, b.of, larger);
  c.of_nograd = combined(a.of_nograd, a.of, b.of_nograd, b.of, larger);
  c.ob = combined(a.ob, a.ob, b.ob, b.ob, larger);
  c.wg = combined(a.wg, zeros, b.wg, zeros, larger);
  c.wd_handed = combined(a.wd_handed, zeros, b.wd_handed, zeros, smaller);
  // Bytes held over each (first, last), summed (several storages may share one range).
  auto byRange = [](const std::vector<Span>& spans) {
    std::map<std::pair<int, int>, int64_t> bytes;
    for (const Span& span : spans) bytes[{span.first, span.last}] += span.bytes;
    return bytes;
  };
  const auto b_bytes = byRange(b.spans);
  for (const auto& [range, bytes] : byRange(a.spans)) {
    const auto found = b_bytes.find(range);
    if (found != b_bytes.end())
      c.spans.push_back({range.first, range.second, std::min(bytes, found->second)});
  }
  c.held_output = std::max(a.held_output, b.held_output);
  std::set_union(a.runs_once.begin(), a.runs_once.end(), b.runs_once.begin(), b.runs_once.end(),
                 std::back_inserter(c.runs_once));
  validate(c);
  return c;
}

void validate(const Costs& chain) {
  const size_t n = chain.uf.size();
  if (n < 2)
    fail("chain is empty: it needs at least one stage (every field has L+1 entries, L >= 1)");
  auto checkLength = [&](size_t size, const char* field) {
    if (size != n) {
      std::ostringstream os;
      os << "chain field '" << field << "' has " << size << " entries but 'uf' has " << n
         << ": every field needs L+1 entries";
      fail(os.str());
    }
  };
  checkLength(chain.ub.size(), "ub");
  checkLength(chain.wa.size(), "wa");
  checkLength(chain.wabar.size(), "wabar");
  checkLength(chain.wd.size(), "wd");
  checkLength(chain.of.size(), "of");
  checkLength(chain.ob.size(), "ob");
  if (!chain.uf_nograd.empty()) checkLength(chain.uf_nograd.size(), "uf_nograd");
  if (!chain.of_nograd.empty()) checkLength(chain.of_nograd.size(), "of_nograd");
  if (!chain.wg.empty()) checkLength(chain.wg.size(), "wg");
  if (!chain.wd_handed.empty()) checkLength(chain.wd_handed.size(), "wd_handed");
  checkNonNegative(chain.uf, "uf");
  checkNonNegative(chain.uf_nograd, "uf_nograd");
  checkNonNegative(chain.ub, "ub");
  checkNonNegative(chain.wa, "wa");
  checkNonNegative(chain.wabar, "wabar");
  checkNonNegative(chain.wd, "wd");
  checkNonNegative(chain.of, "of");
  checkNonNegative(chain.of_nograd, "of_nograd");
  checkNonNegative(chain.ob, "ob");
  checkNonNegative(chain.wg, "wg");
  checkNonNegative(chain.wd_handed, "wd_handed");
  for (size_t l = 1; l < n; ++l) {
    if (chain.wabar[l] < chain.wa[l]) {
      std::ostringstream os;
      os << "chain field 'wabar' at stage " << l << " is " << chain.wabar[l] << ", less than wa ("
         << chain.wa[l] << "): abar includes the stage output a";
      fail(os.str());
    }
  }
  validateSpans(chain);
  validateHanded(chain);
  for (size_t i = 0; i < chain.runs_once.size(); ++i) {
    const int l = chain.runs_once[i];
    if (l < 1 || l >= static_cast<int>(n) || (i > 0 && l <= chain.runs_once[i - 1])) {
      fail("chain field 'runs_once' entry " + std::to_string(i) + " is " + std::to_string(l) +
           ": it lists stages of 1.." + std::to_string(n - 1) + " in ascending order");
    }
  }
  if (chain.held_output < 0) fail("chain field 'held_output' is negative");
  if (chain.held_output > 0 && n < 3)
    fail(
        "chain field 'held_output' needs at least two stages: it is the bytes of a^{L-1}, the "
        "input of the terminal stage L");
}

Costs costsFromJson(const std::string& text) {
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::parse_error& e) {
    fail(std::string("chain file is not valid JSON: ") + e.what());
  }
  if (!json.is_object())
    fail("chain file must hold a JSON object with fields uf, ub, wa, wabar, wd, of, ob");
  Costs chain;
  chain.uf = readField<double>(json, "uf");
  chain.ub = readField<double>(json, "ub");
  chain.wa = readField<int64_t>(json, "wa");
  chain.wabar = readField<int64_t>(json, "wabar");
  chain.wd = readField<int64_t>(json, "wd");
  chain.of = readField<int64_t>(json, "of");
  chain.ob = readField<int64_t>(json, "ob");
  if (json.contains("uf_nograd")) chain.uf_nograd = readField<double>(json, "uf_nograd");
  if (json.contains("of_nograd")) chain.of_nograd = readField<int64_t>(json, "of_nograd");
  if (json.contains("wg")) chain.wg = readField<int64_t>(json, "wg");
  if (json.contains("wd_handed")) chain.wd_handed = readField<int64_t>(json, "wd_handed");
  if (json.contains("spans") && json.contains("wpass"))
    fail("chain file gives both 'spans' and 'wpass' (the older form of spans): give one");
  if (json.contains("spans")) chain.spans = readSpans(json);
  if (json.contains("wpass"))
    chain.spans = spansOfPassed(readField<int64_t>(json, "wpass"), chain.wa);
  if (json.contains("held_output")) {
    const Json& held = json.at("held_output");
    if (!held.is_number_integer()) fail("chain field 'held_output' must be an integer (bytes)");
    chain.held_output = held.get<int64_t>();
  }
  if (json.contains("runs_once")) chain.runs_once = readField<int>(json, "runs_once");
  validate(chain);
  return chain;
}

std::string costsToJson(const Costs& chain) {
  Json json = {{"uf", chain.uf}, {"ub", chain.ub}, {"wa", chain.wa}, {"wabar", chain.wabar},
               {"wd", chain.wd}, {"of", chain.of}, {"ob", chain.ob}};
  if (!chain.uf_nograd.empty()) json["uf_nograd"] = chain.uf_nograd;
  if (!chain.of_nograd.empty()) json["of_nograd"] = chain.of_nograd;
  if (!chain.wg.empty()) json["wg"] = chain.wg;
  if (!chain.wd_handed.empty()) json["wd_handed"] = chain.wd_handed;
  if (!chain.spans.empty()) {
    Json spans = Json::array();
    for (const Span& span : chain.spans) spans.push_back({span.first, span.last, span.bytes});
    json["spans"] = spans;
  }
  if (chain.held_output > 0) json["held_output"] = chain.held_output;
  if (!chain.runs_once.empty()) json["runs_once"] = chain.runs_once;
  return json.dump(1);
}

Costs readCostsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open chain file '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return costsFromJson(buffer.str());
  } catch (const std::invalid_argument& e) {
    fail(path + ": " + e.what());
  }
}

void writeCostsFile(const Costs& chain, const std::string& path) {
  std::ofstream out(path);
  if (!out) fail("cannot write chain file '" + path + "'");
  out << costsToJson(chain) << "\n";
}

}  // namespace jitckpt::solver
