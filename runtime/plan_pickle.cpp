// Plan serialization (torch::class_ def_pickle): metadata as JSON, stage graphs as IR text, tensor
// constants as tensors. Format 1.
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "runtime/graph_text.h"
#include "runtime/plan.h"

namespace jitckpt {
namespace {

using Json = nlohmann::json;

// The first line of a message that is not blank (the IR parser's start with a newline).
std::string firstLineOf(const std::string& message) {
  std::istringstream lines(message);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t") != std::string::npos) return line;
  }
  return message;
}

Json solutionToJson(const Solution& s) {
  Json meta;
  meta["strategy"] = solver::toString(s.strategy);
  meta["slots"] = s.slots;
  meta["segments"] = s.segments;
  meta["requested_limit"] = s.requested_limit.toText();
  meta["outside_gradient_bytes"] = s.outside_gradient_bytes;
  meta["epilogue_gradient_bytes"] = s.epilogue_gradient_bytes;
  meta["prologue_gradient_bytes"] = s.prologue_gradient_bytes;
  meta["profile_repeats"] = s.profile_repeats;
  if (s.strategy == solver::Strategy::Given) meta["given_schedule"] = solver::toString(s.given);
  if (s.deferred) {  // planned where it runs
    meta["deferred"] = true;
    return meta;
  }
  meta["costs"] = Json::parse(solver::costsToJson(s.costs));
  meta["schedule"] = solver::toString(s.schedule);
  meta["memory_limit"] = s.memory_limit;
  meta["predicted_peak"] = s.predicted_peak;
  meta["predicted_time"] = s.predicted_time;
  meta["unconstrained_peak"] = s.unconstrained_peak;
  meta["input_shapes"] = s.input_key.shapes;
  meta["input_types"] = s.input_key.types;
  Json curve = Json::array();
  for (const auto& p : s.curve) curve.push_back({p.limit, p.time});
  meta["curve"] = curve;
  return meta;
}

Solution solutionFromJson(const Json& meta) {
  const solver::Schedule given = solver::parseSchedule(meta.value("given_schedule", std::string()));
  if (meta.value("deferred", false)) {
    Solution s =
        deferredSolution(solver::MemoryLimit::parse(meta.at("requested_limit").get<std::string>()),
                         solver::parseStrategy(meta.at("strategy").get<std::string>()),
                         meta.at("slots").get<int>(), meta.value("segments", 0), given);
    s.outside_gradient_bytes = meta.value("outside_gradient_bytes", int64_t{0});
    s.epilogue_gradient_bytes = meta.value("epilogue_gradient_bytes", int64_t{0});
    s.prologue_gradient_bytes = meta.value("prologue_gradient_bytes", int64_t{0});
    s.profile_repeats = meta.value("profile_repeats", 3);
    return s;
  }
  Solution s;
  s.outside_gradient_bytes = meta.value("outside_gradient_bytes", int64_t{0});
  s.epilogue_gradient_bytes = meta.value("epilogue_gradient_bytes", int64_t{0});
  s.prologue_gradient_bytes = meta.value("prologue_gradient_bytes", int64_t{0});
  s.profile_repeats = meta.value("profile_repeats", 5);
  s.costs = solver::costsFromJson(meta.at("costs").dump());
  s.schedule = solver::parseSchedule(meta.at("schedule").get<std::string>());
  s.strategy = solver::parseStrategy(meta.at("strategy").get<std::string>());
  s.memory_limit = meta.at("memory_limit").get<int64_t>();
  s.predicted_peak = meta.at("predicted_peak").get<int64_t>();
  s.predicted_time = meta.at("predicted_time").get<double>();
  s.slots = meta.at("slots").get<int>();
  s.segments = meta.value("segments", 0);
  s.given = given;
  s.unconstrained_peak = meta.at("unconstrained_peak").get<int64_t>();
  s.input_key.shapes = meta.at("input_shapes").get<std::vector<std::vector<int64_t>>>();
  // Absent from plans saved before they were recorded.
  s.input_key.types = meta.value("input_types", std::vector<std::string>{});
  s.requested_limit =
      meta.contains("requested_limit")
          ? solver::MemoryLimit::parse(meta.at("requested_limit").get<std::string>())
      : s.strategy == solver::Strategy::None ? solver::MemoryLimit::unlimited()
                                             : solver::MemoryLimit::bytes(s.memory_limit);
  for (const auto& p : meta.at("curve"))
    s.curve.push_back({p.at(0).get<int64_t>(), p.at(1).get<double>()});
  return s;
}

std::shared_ptr<const ChainStages> stagesFromState(const Json& meta,
                                                   const std::vector<std::string>& texts,
                                                   const std::vector<at::Tensor>& constants) {
  const auto names = meta.at("lifted_names").get<std::vector<std::string>>();
  const auto kinds = meta.at("lifted_kinds").get<std::vector<int>>();
  TORCH_CHECK(names.size() == kinds.size(), "corrupt jitckpt plan: ", names.size(),
              " lifted names but ", kinds.size(), " kinds");
  // (plans saved before it was recorded: none)
  const auto beyond_shapes = meta.value("lifted_beyond_shapes", std::vector<bool>(names.size()));
  TORCH_CHECK(beyond_shapes.size() == names.size(), "corrupt jitckpt plan: ", names.size(),
              " lifted names but ", beyond_shapes.size(), " marks of values beyond shapes");
  // (saved before the mark existed: not known, so read after)
  const auto read_after_chain =
      meta.value("lifted_read_after_chain", std::vector<bool>(names.size(), true));
  TORCH_CHECK(read_after_chain.size() == names.size(), "corrupt jitckpt plan: ", names.size(),
              " lifted names but ", read_after_chain.size(),
              " marks of values read after the chain");
  std::vector<LiftedSpec> lifted;
  for (size_t k = 0; k < names.size(); ++k) {
    TORCH_CHECK(kinds[k] >= 0 && kinds[k] <= static_cast<int>(LiftedKind::Side),
                "corrupt jitckpt plan: unknown lifted kind ", kinds[k]);
    lifted.push_back(
        {names[k], static_cast<LiftedKind>(kinds[k]), beyond_shapes[k], read_after_chain[k]});
  }
  const auto& stage_meta = meta.at("stages");
  TORCH_CHECK(stage_meta.size() == texts.size(), "corrupt jitckpt plan: ", stage_meta.size(),
              " stage records but ", texts.size(), " stage graphs");
  std::vector<StageSpec> stages;
  size_t next_constant = 0;
  for (size_t s = 0; s < texts.size(); ++s) {
    const Json& m = stage_meta[s];
    StageSpec stage;
    MovedConstants moved;
    moved.count = m.at("num_constants").get<int64_t>();
    if (m.contains("pickled_constants"))  // older files moved tensors only
      moved.pickled = m.at("pickled_constants").get<std::vector<int64_t>>();
    try {
      stage.graph = graphFromText(texts[s], moved, constants, next_constant);
    } catch (const std::exception& e) {  // the IR parser's ErrorReport is no c10::Error
      TORCH_CHECK(false, "corrupt jitckpt plan in this file: the graph of stage ", s + 1,
                  " does not parse (", firstLineOf(e.what()), "); re-create it with jitckpt");
    }
    stage.num_activation_inputs = m.at("num_activation_inputs").get<size_t>();
    stage.lifted = m.at("lifted").get<std::vector<size_t>>();
    stage.mutated_lifted = m.at("mutated_lifted").get<std::vector<size_t>>();
    stage.writes_activation_input = m.at("writes_activation_input").get<bool>();
    stage.label = m.at("label").get<std::string>();
    stages.push_back(std::move(stage));
  }
  std::shared_ptr<const ChainStages> chain;
  try {
    chain = std::make_shared<const ChainStages>(stages, std::move(lifted));
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "corrupt jitckpt plan in this file: ", e.what_without_backtrace(),
                "; re-create it with jitckpt");
  }
  // Absent from plans saved before it was recorded: such a plan learns it at its first backward.
  for (size_t s = 0; s < texts.size(); ++s) {
    if (stage_meta[s].value("copies_parameter_gradients", false))
      chain->setCopiesParameterGradients(static_cast<int>(s) + 1);
  }
  const auto positions = meta.at("lifted_position").get<std::vector<size_t>>();
  for (size_t k = 0; k < positions.size(); ++k) {
    TORCH_CHECK(k < chain->lifted().size() && positions[k] == chain->position(k),
                "corrupt jitckpt plan: lifted value ", k, " is out of place");
  }
  return chain;
}

}  // namespace

Plan::State Plan::getState() const {
  Json meta = solutionToJson(solution_);
  meta["format"] = 1;
  std::vector<std::string> names;
  std::vector<int> kinds;
  std::vector<size_t> positions;
  std::vector<bool> beyond_shapes, read_after_chain;
  for (size_t k = 0; k < stages_->lifted().size(); ++k) {
    names.push_back(stages_->lifted()[k].name);
    kinds.push_back(static_cast<int>(stages_->lifted()[k].kind));
    positions.push_back(stages_->position(k));
    beyond_shapes.push_back(stages_->lifted()[k].beyond_shapes);
    read_after_chain.push_back(stages_->lifted()[k].read_after_chain);
  }
  meta["lifted_names"] = names;
  meta["lifted_kinds"] = kinds;
  meta["lifted_beyond_shapes"] = beyond_shapes;
  meta["lifted_read_after_chain"] = read_after_chain;
  meta["lifted_position"] = positions;
  std::vector<std::string> texts;
  std::vector<at::Tensor> constants;
  Json stage_meta = Json::array();
  for (int l = 1; l <= numStages(); ++l) {
    const StageSpec& s = stages_->stage(l);
    MovedConstants moved;
    texts.push_back(graphToText(*s.graph, constants, moved));
    stage_meta.push_back({{"num_activation_inputs", s.num_activation_inputs},
                          {"lifted", s.lifted},
                          {"mutated_lifted", s.mutated_lifted},
                          {"writes_activation_input", s.writes_activation_input},
                          {"has_random_ops", stages_->hasRandomOps(l)},
                          {"copies_parameter_gradients", stages_->copiesParameterGradients(l)},
                          {"label", s.label},
                          {"num_constants", moved.count},
                          {"pickled_constants", moved.pickled}});
  }
  meta["stages"] = stage_meta;
  return {meta.dump(), texts, constants};
}

c10::intrusive_ptr<Plan> Plan::fromState(State state) {
  const auto& [meta_text, texts, constants] = state;
  auto corrupt = [](const char* what) {
    TORCH_CHECK(false, "corrupt jitckpt plan in this file (", what, "); re-create it with jitckpt");
  };
  try {
    const Json meta = Json::parse(meta_text);
    TORCH_CHECK(meta.at("format").get<int>() == 1, "unknown jitckpt plan format ",
                meta.at("format").dump(), ": this file was written by another version of jitckpt");
    return c10::make_intrusive<Plan>(stagesFromState(meta, texts, constants),
                                     solutionFromJson(meta));
  } catch (const Json::exception& e) {
    corrupt(e.what());
  } catch (const std::invalid_argument& e) {
    corrupt(e.what());
  }
  return {};
}

}  // namespace jitckpt
