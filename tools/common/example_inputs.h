// Example inputs from the command line, shared by the tools: "[DTYPE:]D0,D1,...[=FILL]", such as
// "8,3,224,224" (float32, standard normal), "int64:4,128" (zeros: valid token ids) or
// "bool:4,128=0". Integers and booleans are filled with FILL (0 and true by default); floats
// are random unless FILL is given. Throws std::invalid_argument saying what is accepted.
#pragma once

#include <torch/script.h>

#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace jitckpt::tools {

inline const std::map<std::string, at::ScalarType>& inputDtypes() {
  static const std::map<std::string, at::ScalarType> dtypes = {
      {"float32", at::kFloat},     {"float", at::kFloat},  {"float64", at::kDouble},
      {"double", at::kDouble},     {"float16", at::kHalf}, {"half", at::kHalf},
      {"bfloat16", at::kBFloat16}, {"int64", at::kLong},   {"long", at::kLong},
      {"int32", at::kInt},         {"int", at::kInt},      {"int16", at::kShort},
      {"int8", at::kChar},         {"uint8", at::kByte},   {"bool", at::kBool}};
  return dtypes;
}

inline at::Tensor exampleInput(const std::string& spec) {
  const std::string usage = "input '" + spec +
                            "': give [DTYPE:]D0,D1,...[=FILL] such as 8,3,224,224, int64:4,128 "
                            "or bool:4,128=1 (DTYPE: float32, float64, float16, bfloat16, "
                            "int64, int32, int16, int8, uint8, bool)";
  std::string rest = spec;
  at::ScalarType dtype = at::kFloat;
  if (const size_t colon = rest.find(':'); colon != std::string::npos) {
    const auto found = inputDtypes().find(rest.substr(0, colon));
    if (found == inputDtypes().end()) throw std::invalid_argument("unknown dtype in " + usage);
    dtype = found->second;
    rest = rest.substr(colon + 1);
  }
  std::optional<double> fill;
  if (const size_t equals = rest.find('='); equals != std::string::npos) {
    try {
      size_t used = 0;
      fill = std::stod(rest.substr(equals + 1), &used);
      if (used != rest.size() - equals - 1) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw std::invalid_argument("the fill value is not a number in " + usage);
    }
    rest = rest.substr(0, equals);
  }
  std::vector<int64_t> shape;
  std::stringstream parts(rest);
  for (std::string part; std::getline(parts, part, ',');) {
    try {
      size_t used = 0;
      const long long dim = std::stoll(part, &used);
      if (used != part.size() || dim < 1) throw std::invalid_argument("");
      shape.push_back(dim);
    } catch (const std::exception&) {
      throw std::invalid_argument("the shape must be positive integers in " + usage);
    }
  }
  if (shape.empty()) throw std::invalid_argument("no shape in " + usage);
  const auto options = at::TensorOptions().dtype(dtype);
  if (fill) return at::full(shape, *fill, options);
  if (at::isFloatingType(dtype)) return at::randn(shape, options);
  return at::full(shape, dtype == at::kBool ? 1.0 : 0.0, options);
}

}  // namespace jitckpt::tools
