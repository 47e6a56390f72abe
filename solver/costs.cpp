// Costs cost model: validation and JSON I/O (nlohmann::json).
#include "solver/costs.h"

#include <fstream>
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

}  // namespace

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
  if (!chain.wpass.empty()) checkLength(chain.wpass.size(), "wpass");
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
  checkNonNegative(chain.wpass, "wpass");
  if (!chain.wpass.empty() && chain.wpass[0] != 0)
    fail("chain field 'wpass' at stage 0 is " + std::to_string(chain.wpass[0]) +
         ": the chain input passes nothing through, give 0");
  for (size_t l = 1; l < n; ++l) {
    if (chain.wabar[l] < chain.wa[l]) {
      std::ostringstream os;
      os << "chain field 'wabar' at stage " << l << " is " << chain.wabar[l] << ", less than wa ("
         << chain.wa[l] << "): abar includes the stage output a";
      fail(os.str());
    }
    const int64_t passed = chain.passedBytes(static_cast<int>(l));
    if (passed > chain.wa[l] || passed > chain.wa[l - 1]) {
      std::ostringstream os;
      os << "chain field 'wpass' at stage " << l << " is " << passed << ", more than wa[" << l
         << "] (" << chain.wa[l] << ") or wa[" << l - 1 << "] (" << chain.wa[l - 1]
         << "): it is the part of a^" << l << " that a^" << l - 1 << " holds";
      fail(os.str());
    }
  }
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
  if (json.contains("wpass")) chain.wpass = readField<int64_t>(json, "wpass");
  validate(chain);
  return chain;
}

std::string costsToJson(const Costs& chain) {
  Json json = {{"uf", chain.uf}, {"ub", chain.ub}, {"wa", chain.wa}, {"wabar", chain.wabar},
               {"wd", chain.wd}, {"of", chain.of}, {"ob", chain.ob}};
  if (!chain.uf_nograd.empty()) json["uf_nograd"] = chain.uf_nograd;
  if (!chain.of_nograd.empty()) json["of_nograd"] = chain.of_nograd;
  if (!chain.wg.empty()) json["wg"] = chain.wg;
  if (!chain.wpass.empty()) json["wpass"] = chain.wpass;
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
