// The reason an exception gives, for error messages that wrap it: a c10::Error without its C++
// backtrace, and for an error raised inside the TorchScript interpreter its last "...Error: ..."
// line rather than the TorchScript traceback above it.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace jitckpt {

inline std::string reasonOf(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  std::string text = error ? error->what_without_backtrace() : e.what();
  if (text.find("Traceback of TorchScript") == std::string::npos) return text;
  // The interpreter's message ends with the original error: "RuntimeError: Given groups=1, ...".
  const size_t marker = text.rfind("Error: ");
  if (marker == std::string::npos) return text;
  const size_t start = text.rfind('\n', marker);
  std::string reason = text.substr(start == std::string::npos ? 0 : start + 1);
  while (!reason.empty() && (reason.back() == '\n' || reason.back() == ' ')) reason.pop_back();
  return reason;
}

}  // namespace jitckpt
