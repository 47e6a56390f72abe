// The planning options a user sets, one definition for jitckpt.checkpoint's keywords and for
// `jitckpt optimize`'s flags: each has a name (the Python keyword; on the command line --name with
// dashes for underscores), a help line, its default and its choices as text, and a parser from
// text into a CheckpointRequest. Takes option names and texts; returns the request. Counts out of
// range are refused by checkpoint itself (checkpoint.cpp), for C++ callers too.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "planner/checkpoint.h"

namespace jitckpt {

struct CheckpointRequest {
  MemoryLimit limit;
  CheckpointOptions options;
};

struct UserOption {
  std::string name;
  std::string help;
  std::string default_text;
  std::vector<std::string> choices;  // empty: any text the parser takes
  std::function<void(CheckpointRequest&, const std::string& text)> set;
};

const std::vector<UserOption>& userOptions();

// "--max-stages" for max_stages.
std::string flagOf(const UserOption& option);

// Every option at its default.
CheckpointRequest defaultRequest();

// Sets option `name` from `text`. Throws std::invalid_argument naming the option and what it
// takes, for an unknown name or a text it cannot read.
void setUserOption(CheckpointRequest& request, const std::string& name, const std::string& text);

// Every option at its default, then those in `texts`, in the order userOptions lists them (so
// that the request does not depend on the order they were given in).
CheckpointRequest makeRequest(const std::map<std::string, std::string>& texts);

}  // namespace jitckpt
