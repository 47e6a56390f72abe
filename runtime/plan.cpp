// Plan: metadata, printing, pickling (stage graphs as IR text with tensor constants lifted out).
#include "runtime/plan.h"

#include <torch/csrc/jit/ir/irparser.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "passes/solver/memory_size.h"
#include "passes/solver/simulator.h"

namespace jitckpt {
namespace {

using Json = nlohmann::json;

bool hasRandomOps(const torch::jit::Block* block) {
  for (const torch::jit::Node* n : block->nodes()) {
    if (n->isNondeterministic()) return true;
    for (const auto* b : n->blocks()) {
      if (hasRandomOps(b)) return true;
    }
  }
  return false;
}

// Moves tensor constants out of a copy of `graph` into extra trailing inputs, so that the IR text
// can be parsed back (parseIR cannot read tensor constants).
std::string graphToText(torch::jit::Graph& graph, std::vector<at::Tensor>& constants,
                        int64_t& count) {
  auto copy = graph.copy();
  std::vector<torch::jit::Node*> tensor_constants;
  for (torch::jit::Node* n : copy->nodes()) {
    if (n->kind() == c10::prim::Constant &&
        n->output()->type()->kind() == c10::TypeKind::TensorType) {
      tensor_constants.push_back(n);
    }
  }
  count = static_cast<int64_t>(tensor_constants.size());
  for (torch::jit::Node* n : tensor_constants) {
    torch::jit::Value* input = copy->addInput();
    input->setType(n->output()->type());
    n->output()->replaceAllUsesWith(input);
    constants.push_back(n->t(c10::attr::value));
    n->destroy();
  }
  // The printer writes a node without outputs as " = prim::If(...)"; the 1.13 parser reads such
  // a node only without the "= ".
  std::istringstream lines(copy->toString(false));
  std::string text, line;
  while (std::getline(lines, line)) {
    const size_t start = line.find_first_not_of(' ');
    // The printer writes the (empty) output list, then " = ": drop both to keep the indentation.
    if (start != std::string::npos && start > 0 && line.compare(start, 2, "= ") == 0)
      line.erase(start - 1, 3);
    text += line;
    text += '\n';
  }
  return text;
}

std::shared_ptr<torch::jit::Graph> graphFromText(const std::string& text, int64_t num_constants,
                                                 const std::vector<at::Tensor>& constants,
                                                 size_t& next) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(text, graph.get());
  const size_t first = graph->inputs().size() - static_cast<size_t>(num_constants);
  for (int64_t k = 0; k < num_constants; ++k) {
    TORCH_CHECK(next < constants.size(), "corrupt jitckpt plan: missing tensor constants");
    torch::jit::Value* input = graph->inputs()[first];
    torch::jit::WithInsertPoint guard(graph->block()->nodes().front());
    torch::jit::Value* constant = graph->insertConstant(constants[next++]);
    input->replaceAllUsesWith(constant);
    graph->eraseInput(first);
  }
  return graph;
}

[[maybe_unused]] const char* kindName(LiftedKind kind) {
  return kind == LiftedKind::Parameter ? "parameter"
         : kind == LiftedKind::Buffer  ? "buffer"
                                       : "scalar";
}

}  // namespace

c10::intrusive_ptr<Plan> Plan::fromPartition(const Partition& partition) {
  auto plan = c10::make_intrusive<Plan>();
  size_t tensors = 0, scalars = 0;
  for (const LiftedInput& l : partition.lifted) {
    plan->lifted_names.push_back(l.name);
    plan->lifted_kinds.push_back(l.kind);
    plan->lifted_position.push_back(l.kind == LiftedKind::Scalar ? scalars++ : tensors++);
  }
  for (const Stage& s : partition.stages) {
    PlanStage stage;
    stage.graph = s.graph->copy();
    stage.num_activation_inputs = s.num_activation_inputs;
    stage.lifted = s.lifted;
    stage.mutated_lifted = s.mutated_lifted;
    stage.writes_activation_input = s.writes_activation_input;
    stage.has_random_ops = hasRandomOps(s.graph->block());
    stage.label = s.label;
    plan->stages.push_back(std::move(stage));
  }
  return plan;
}

void Plan::validate() const {
  TORCH_CHECK(!stages.empty(), "jitckpt plan has no stages");
  TORCH_CHECK(costs.length() == numStages() + 1, "jitckpt plan: costs describe ", costs.length(),
              " stages but the plan has ", numStages(), " stages plus the terminal one");
  const solver::SimulationResult sim = solver::simulate(costs, schedule);
  TORCH_CHECK(sim.valid && sim.complete, "jitckpt plan: the schedule is not valid for this chain (",
              sim.valid ? "it does not reach the input gradient" : sim.reason,
              "); re-run jitckpt.checkpoint to make a new plan");
  // The forward part ends at the first B, which must be the terminal stage's.
  for (const auto& op : schedule) {
    if (op.kind == solver::OpKind::Backward) {
      TORCH_CHECK(op.stage == numStages() + 1, "jitckpt plan: the first backward op is ",
                  solver::toString(op), ", expected B(", numStages() + 1,
                  ") (the hand-off to autograd)");
      break;
    }
  }
}

std::string Plan::str() const {
  std::ostringstream os;
  os << "jitckpt.Plan: " << stages.size() << " stages, strategy " << strategy << ", limit "
     << solver::formatBytes(memory_limit) << ", predicted peak "
     << solver::formatBytes(predicted_peak) << ", predicted time " << predicted_time << "\n";
  for (size_t s = 0; s < stages.size(); ++s) {
    const PlanStage& st = stages[s];
    os << "  stage " << s + 1 << " \"" << st.label << "\": " << st.num_activation_inputs
       << " input(s)";
    if (costs.length() > static_cast<int>(s)) {
      os << ", a " << solver::formatBytes(costs.wa[s + 1]) << ", abar "
         << solver::formatBytes(costs.wabar[s + 1]);
    }
    if (st.writes_activation_input) os << ", writes its input";
    if (st.has_random_ops) os << ", random";
    if (!st.mutated_lifted.empty()) os << ", updates buffers";
    os << "\n";
  }
  os << "  stage " << stages.size() + 1 << " (terminal): hand-off to autograd\n";
  os << "schedule: " << solver::toString(schedule) << "\n";
  return os.str();
}

Plan::State Plan::getState() const {
  Json meta;
  meta["format"] = 1;
  meta["lifted_names"] = lifted_names;
  std::vector<int> kinds;
  for (LiftedKind k : lifted_kinds) kinds.push_back(static_cast<int>(k));
  meta["lifted_kinds"] = kinds;
  meta["lifted_position"] = lifted_position;
  meta["costs"] = Json::parse(solver::chainToJson(costs));
  meta["schedule"] = solver::toString(schedule);
  meta["strategy"] = strategy;
  meta["memory_limit"] = memory_limit;
  meta["predicted_peak"] = predicted_peak;
  meta["predicted_time"] = predicted_time;
  meta["slots"] = slots;
  meta["unconstrained_peak"] = unconstrained_peak;
  meta["input_shapes"] = input_shapes;
  Json curve_json = Json::array();
  for (const auto& p : curve) curve_json.push_back({p.limit, p.time});
  meta["curve"] = curve_json;
  std::vector<std::string> texts;
  std::vector<at::Tensor> constants;
  Json stage_meta = Json::array();
  for (const PlanStage& s : stages) {
    int64_t count = 0;
    texts.push_back(graphToText(*s.graph, constants, count));
    stage_meta.push_back({{"num_activation_inputs", s.num_activation_inputs},
                          {"lifted", s.lifted},
                          {"mutated_lifted", s.mutated_lifted},
                          {"writes_activation_input", s.writes_activation_input},
                          {"has_random_ops", s.has_random_ops},
                          {"label", s.label},
                          {"num_constants", count}});
  }
  meta["stages"] = stage_meta;
  return {meta.dump(), texts, constants};
}

c10::intrusive_ptr<Plan> Plan::fromState(State state) {
  auto plan = c10::make_intrusive<Plan>();
  const auto& [meta_text, texts, constants] = state;
  try {
    const Json meta = Json::parse(meta_text);
    TORCH_CHECK(meta.at("format").get<int>() == 1, "unknown jitckpt plan format ",
                meta.at("format").dump(), ": this file was written by another version of jitckpt");
    plan->lifted_names = meta.at("lifted_names").get<std::vector<std::string>>();
    for (int k : meta.at("lifted_kinds").get<std::vector<int>>())
      plan->lifted_kinds.push_back(static_cast<LiftedKind>(k));
    plan->lifted_position = meta.at("lifted_position").get<std::vector<size_t>>();
    plan->costs = solver::chainFromJson(meta.at("costs").dump());
    plan->schedule = solver::parseSchedule(meta.at("schedule").get<std::string>());
    plan->strategy = meta.at("strategy").get<std::string>();
    plan->memory_limit = meta.at("memory_limit").get<int64_t>();
    plan->predicted_peak = meta.at("predicted_peak").get<int64_t>();
    plan->predicted_time = meta.at("predicted_time").get<double>();
    plan->slots = meta.at("slots").get<int>();
    plan->unconstrained_peak = meta.at("unconstrained_peak").get<int64_t>();
    plan->input_shapes = meta.at("input_shapes").get<std::vector<std::vector<int64_t>>>();
    for (const auto& p : meta.at("curve"))
      plan->curve.push_back({p.at(0).get<int64_t>(), p.at(1).get<double>()});
    const auto& stage_meta = meta.at("stages");
    TORCH_CHECK(stage_meta.size() == texts.size(), "corrupt jitckpt plan: ", stage_meta.size(),
                " stage records but ", texts.size(), " stage graphs");
    size_t next_constant = 0;
    for (size_t s = 0; s < texts.size(); ++s) {
      const Json& m = stage_meta[s];
      PlanStage stage;
      stage.graph =
          graphFromText(texts[s], m.at("num_constants").get<int64_t>(), constants, next_constant);
      stage.num_activation_inputs = m.at("num_activation_inputs").get<size_t>();
      stage.lifted = m.at("lifted").get<std::vector<size_t>>();
      stage.mutated_lifted = m.at("mutated_lifted").get<std::vector<size_t>>();
      stage.writes_activation_input = m.at("writes_activation_input").get<bool>();
      stage.has_random_ops = m.at("has_random_ops").get<bool>();
      stage.label = m.at("label").get<std::string>();
      plan->stages.push_back(std::move(stage));
    }
  } catch (const Json::exception& e) {
    TORCH_CHECK(false, "corrupt jitckpt plan in this file (", e.what(),
                "); re-create it with jitckpt");
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "corrupt jitckpt plan in this file (", e.what(),
                "); re-create it with jitckpt");
  }
  plan->validate();
  return plan;
}

torch::jit::Code& Plan::code(size_t stage) const {
  std::lock_guard<std::mutex> lock(codes_mutex_);
  if (codes_.size() != stages.size()) codes_.resize(stages.size());
  if (!codes_[stage]) {
    codes_[stage] = std::make_unique<torch::jit::Code>(
        stages[stage].graph, "jitckpt_stage_" + std::to_string(stage + 1));
  }
  return *codes_[stage];
}

c10::ClassTypePtr planType() {
  return torch::getCustomClass("__torch__.torch.classes.jitckpt.Plan");
}

}  // namespace jitckpt
