// Turns the C++ warnings (TORCH_WARN) raised inside a binding into Python warnings, so that
// Python's `warnings` module filters and catches them, as torch's own bindings do. Declare one
// first in a binding that may warn; the GIL must be held when it goes out of scope.
#pragma once

#include <torch/csrc/Exceptions.h>

#include <exception>

namespace jitckpt {

class PythonWarnings {
 public:
  PythonWarnings() = default;
  // With an exception in flight the warnings are printed instead: a warning filter set to
  // "error" cannot raise a second exception.
  ~PythonWarnings() noexcept(false) {
    if (std::uncaught_exceptions() > 0) handler_.set_in_exception();
  }
  PythonWarnings(const PythonWarnings&) = delete;
  PythonWarnings& operator=(const PythonWarnings&) = delete;

 private:
  torch::PyWarningHandler handler_;
};

}  // namespace jitckpt
