// Runs a command-line tool's work and turns its errors into one "error: ..." line on stderr and
// exit status 2: a c10::Error without its C++ backtrace, so users see what was wrong and what to
// do rather than stack frames.
#pragma once

#include <c10/util/Exception.h>

#include <functional>
#include <iostream>

namespace jitckpt::tools {

inline int reportErrors(const std::function<void()>& work) {
  try {
    work();
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace jitckpt::tools
