// The planning options a user sets (see user_options.h).
#include "planner/user_options.h"

#include <algorithm>
#include <stdexcept>

#include "solver/schedule.h"

namespace jitckpt {
namespace {

int count(const std::string& name, const std::string& text) {
  size_t read = 0;
  int value = 0;
  try {
    value = std::stoi(text, &read);
  } catch (const std::exception&) {
    read = 0;
  }
  if (read == 0 || read != text.size())
    throw std::invalid_argument(name + " must be a whole number, not '" + text + "'");
  return value;
}

bool flag(const std::string& name, const std::string& text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  throw std::invalid_argument(name + " must be true or false, not '" + text + "'");
}

// A given schedule runs as given: strategy "optimal" (the default) or "given" may stand beside it.
void runGiven(CheckpointRequest& r) {
  if (r.options.given.empty()) return;
  if (r.options.strategy != Strategy::Optimal && r.options.strategy != Strategy::Given)
    throw std::invalid_argument("a schedule is run as given: leave strategy ('" +
                                solver::toString(r.options.strategy) + "') out");
  r.options.strategy = Strategy::Given;
}

// A whole-number option held in CheckpointOptions::*field.
UserOption countOption(const std::string& name, const std::string& help,
                       const std::string& default_text, int CheckpointOptions::*field) {
  return {
      name, help, default_text, {}, [name, field](CheckpointRequest& r, const std::string& text) {
        r.options.*field = count(name, text);
      }};
}

std::vector<UserOption> makeOptions() {
  return {
      {"memory_limit",
       "activation memory: bytes (2GiB, 512MiB), a fraction of the unconstrained peak (0.5, "
       "50%), min, auto or none",
       "0.5",
       {},
       [](CheckpointRequest& r, const std::string& text) { r.limit = MemoryLimit::parse(text); }},
      {"strategy",
       "optimal, periodic, revolve or none (for comparisons)",
       "optimal",
       {"optimal", "periodic", "revolve", "none", "given"},
       [](CheckpointRequest& r, const std::string& text) {
         r.options.strategy = solver::parseStrategy(text);
         runGiven(r);
       }},
      {"schedule",
       "a schedule of your own over the stages and the terminal hand-off, run as given "
       "(\"Fck(1) Fall(2) Fall(3) B(3) B(2) Fall(1) B(1)\" for two stages)",
       "",
       {},
       [](CheckpointRequest& r, const std::string& text) {
         r.options.given = solver::parseSchedule(text);
         runGiven(r);
       }},
      countOption("slots", "memory slots of the solver", "500", &CheckpointOptions::slots),
      countOption("segments", "periodic: segment count (0: the fastest that fits)", "0",
                  &CheckpointOptions::segments),
      countOption("max_stages", "at most this many stages (0: no limit)", "0",
                  &CheckpointOptions::max_stages),
      {"cuts",
       "cheapest: one cut between two compute-heavy ops; every: each that carries new tensors "
       "(finer stages, a lower smallest limit on some models)",
       "cheapest",
       {"cheapest", "every"},
       [](CheckpointRequest& r, const std::string& text) {
         r.options.every_cut = text == "every";
       }},
      countOption("profile_repeats",
                  "timed runs per stage and direction, their median kept (0: 5 with example "
                  "inputs, 3 at the first training call)",
                  "0", &CheckpointOptions::profile_repeats),
      {"verbose",
       "show the first training call's profiling even off a terminal",
       "false",
       {"true", "false"},
       [](CheckpointRequest& r, const std::string& text) {
         r.options.verbose = flag("verbose", text);
       }},
  };
}

}  // namespace

const std::vector<UserOption>& userOptions() {
  static const std::vector<UserOption> options = makeOptions();
  return options;
}

std::string flagOf(const UserOption& option) {
  std::string flag = "--" + option.name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

CheckpointRequest defaultRequest() {
  CheckpointRequest request;
  for (const auto& option : userOptions()) option.set(request, option.default_text);
  return request;
}

void setUserOption(CheckpointRequest& request, const std::string& name, const std::string& text) {
  const auto& options = userOptions();
  const auto found = std::find_if(options.begin(), options.end(),
                                  [&](const UserOption& o) { return o.name == name; });
  if (found == options.end()) throw std::invalid_argument("jitckpt: no option named " + name);
  if (!found->choices.empty() &&
      std::find(found->choices.begin(), found->choices.end(), text) == found->choices.end()) {
    std::string choices;
    for (const auto& c : found->choices) choices += (choices.empty() ? "" : ", ") + c;
    throw std::invalid_argument("jitckpt: " + name + " must be one of " + choices + ", not '" +
                                text + "'");
  }
  try {
    found->set(request, text);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    throw std::invalid_argument(what.rfind("jitckpt: ", 0) == 0 ? what : "jitckpt: " + what);
  }
}

CheckpointRequest makeRequest(const std::map<std::string, std::string>& texts) {
  for (const auto& [name, text] : texts) {
    const auto& options = userOptions();
    if (std::none_of(options.begin(), options.end(),
                     [&](const UserOption& o) { return o.name == name; }))
      throw std::invalid_argument("jitckpt: no option named " + name);
  }
  CheckpointRequest request = defaultRequest();
  for (const auto& option : userOptions()) {
    const auto given = texts.find(option.name);
    if (given != texts.end()) setUserOption(request, option.name, given->second);
  }
  return request;
}

}  // namespace jitckpt
