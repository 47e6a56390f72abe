// Schedule vocabulary of the paper (Table 1): F∅(l), Fck(l), Fall(l), B(l); printable and
// parseable. Standard C++ only.
#pragma once

#include <string>
#include <vector>

namespace jitckpt::solver {

enum class OpKind {
  ForwardNone,   // F∅(l): replaces a^{l-1} by a^l (keeps abar^{l-1} if that is what is held)
  ForwardCheck,  // Fck(l): keeps its input, adds a^l
  ForwardAll,    // Fall(l): keeps its input, adds abar^l
  Backward,      // B(l): consumes delta^l, abar^l and a^{l-1}; produces delta^{l-1}
};

struct Op {
  OpKind kind;
  int stage;  // 1..L
  bool operator==(const Op& o) const { return kind == o.kind && stage == o.stage; }
  bool operator!=(const Op& o) const { return !(*this == o); }
};

using Schedule = std::vector<Op>;

// "Fn(3)", "Fck(3)", "Fall(3)", "B(3)". The parser also accepts "F∅(3)" and "Fnone(3)".
std::string toString(const Op& op);
// Ops separated by single spaces.
std::string toString(const Schedule& schedule);
// Throws std::invalid_argument naming the offending token.
Schedule parseSchedule(const std::string& text);

}  // namespace jitckpt::solver
