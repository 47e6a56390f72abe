// Path of a scripted fixture model made by test/fixtures/make_models.py, or "" when this build
// made none (the tests that need one then skip).
#pragma once

#include <fstream>
#include <string>

namespace jitckpt::test {

inline std::string fixture(const std::string& name) {
#ifdef JITCKPT_FIXTURE_DIR
  const std::string path = std::string(JITCKPT_FIXTURE_DIR) + "/" + name + ".pt";
  if (std::ifstream(path).good()) return path;
#endif
  return "";
}

}  // namespace jitckpt::test
