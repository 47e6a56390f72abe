// Schedule vocabulary: printing and parsing of F∅/Fck/Fall/B sequences.
#include "solver/schedule.h"

#include <sstream>
#include <stdexcept>

namespace jitckpt::solver {

std::string toString(const Op& op) {
  const char* name = "?";
  switch (op.kind) {
    case OpKind::ForwardNone:
      name = "Fn";
      break;
    case OpKind::ForwardCheck:
      name = "Fck";
      break;
    case OpKind::ForwardAll:
      name = "Fall";
      break;
    case OpKind::Backward:
      name = "B";
      break;
  }
  return std::string(name) + "(" + std::to_string(op.stage) + ")";
}

std::string toString(const Schedule& schedule) {
  std::string out;
  for (const Op& op : schedule) {
    if (!out.empty()) out += ' ';
    out += toString(op);
  }
  return out;
}

Schedule parseSchedule(const std::string& text) {
  Schedule schedule;
  std::istringstream in(text);
  std::string token;
  while (in >> token) {
    const auto open = token.find('(');
    const auto close = token.find(')');
    auto bad = [&](const char* why) {
      throw std::invalid_argument("schedule token '" + token + "' " + why +
                                  ": write ops as Fn(l), Fck(l), Fall(l) or B(l) with l >= 1");
    };
    if (open == std::string::npos || close != token.size() - 1 || close <= open + 1)
      bad("is malformed");
    const std::string name = token.substr(0, open);
    const std::string number = token.substr(open + 1, close - open - 1);
    Op op{};
    if (name == "Fn" || name == "F∅" || name == "Fnone")
      op.kind = OpKind::ForwardNone;
    else if (name == "Fck")
      op.kind = OpKind::ForwardCheck;
    else if (name == "Fall")
      op.kind = OpKind::ForwardAll;
    else if (name == "B")
      op.kind = OpKind::Backward;
    else
      bad("has an unknown operation");
    size_t used = 0;
    try {
      op.stage = std::stoi(number, &used);
    } catch (const std::exception&) {
      bad("has no stage number");
    }
    if (used != number.size() || op.stage < 1) bad("has a bad stage number");
    schedule.push_back(op);
  }
  return schedule;
}

}  // namespace jitckpt::solver
