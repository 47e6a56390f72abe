// jitckpt: the command line. `optimize` rewrites a saved TorchScript module for a memory limit so
// that a training script changes nothing but the file it loads; `inspect` prints a rewritten
// file's plan.
#include <torch/script.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "jitckpt/jitckpt.h"
#include "planner/user_options.h"
#include "solver/memory_limit.h"
#include "tools/common/example_inputs.h"
#include "tools/common/report_errors.h"

namespace {

torch::jit::Module loadModule(const std::string& path) {
  try {
    return torch::jit::load(path);
  } catch (const std::exception& e) {
    // The reason: the message's first line that is not blank (parser errors start with one).
    std::string what = e.what();
    const size_t start = std::min(what.find_first_not_of(" \n"), what.size());
    what = what.substr(start, what.find('\n', start) - start);
    throw std::runtime_error("cannot load '" + path + "' as a TorchScript module (" + what +
                             "); save one with torch.jit.save(torch.jit.script(model), path)");
  }
}

c10::intrusive_ptr<jitckpt::Plan> requirePlan(const torch::jit::Module& module,
                                              const std::string& path) {
  auto plan = jitckpt::planOf(module);
  if (!plan) {
    throw std::runtime_error("'" + path +
                             "' was not rewritten by jitckpt; run `jitckpt optimize` on it first");
  }
  return plan;
}

struct OptimizeOptions {
  std::string input_path, output_path;
  std::vector<std::string> inputs;  // example input specs (example_inputs.h)
  // The planning options given, by name (planner/user_options.h: the Python keywords' too).
  std::map<std::string, std::string> planning;
  bool eval_mode = false;
};

// Fails unless `path` can be written, before anything slow runs.
void requireWritable(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::absolute(path).parent_path();
  if (!fs::is_directory(parent)) {
    throw std::runtime_error("cannot write '" + path + "': the folder '" + parent.string() +
                             "' does not exist; create it first");
  }
  const bool existed = fs::exists(path);
  if (!std::ofstream(path, std::ios::app)) {
    throw std::runtime_error("cannot write '" + path + "' (permissions?)");
  }
  if (!existed) fs::remove(path);
}

void optimize(const OptimizeOptions& o) {
  // Everything that can be checked before profiling is.
  jitckpt::CheckpointRequest request = jitckpt::makeRequest(o.planning);
  const jitckpt::MemoryLimit& limit = request.limit;
  jitckpt::CheckpointOptions& options = request.options;
  std::vector<c10::IValue> inputs;
  for (const auto& spec : o.inputs) inputs.emplace_back(jitckpt::tools::exampleInput(spec));
  requireWritable(o.output_path);
  torch::jit::Module module = loadModule(o.input_path);
  module.train(!o.eval_mode);
  if (inputs.empty()) {  // planned where it trains, at its first training call
    options.progress = [](const std::string&) {};
    torch::jit::Module rewritten = jitckpt::checkpoint(module, limit, options);
    rewritten.save(o.output_path);
    std::cout << "wrote " << o.output_path << ": "
              << requirePlan(rewritten, o.output_path)->numStages() << " stages, limit "
              << limit.toString()
              << "; planned at its first training call, for that call's inputs and device\n";
    return;
  }
  torch::jit::Module rewritten = jitckpt::checkpoint(module, inputs, limit, options);
  rewritten.save(o.output_path);
  const auto plan = requirePlan(rewritten, o.output_path);
  const jitckpt::Solution& s = plan->solution();
  std::cout << "wrote " << o.output_path << ": " << plan->numStages() << " stages, strategy "
            << jitckpt::solver::toString(s.strategy) << ", predicted peak "
            << jitckpt::solver::formatBytes(s.predicted_peak) << " of "
            << jitckpt::solver::formatBytes(s.unconstrained_peak)
            << " unconstrained, predicted time " << s.predicted_time << " ms per step\n";
}

void inspect(const std::string& path, bool print_graph) {
  torch::jit::Module module = loadModule(path);
  const auto plan = requirePlan(module, path);
  const auto& curve = plan->solution().curve;
  std::cout << plan->str();
  if (!curve.empty()) {
    std::cout << "time-memory curve (optimal): " << curve.size() << " points, from "
              << jitckpt::solver::formatBytes(curve.front().limit) << " (" << curve.front().time
              << " ms) to " << jitckpt::solver::formatBytes(curve.back().limit) << " ("
              << curve.back().time << " ms)\n";
  }
  if (print_graph) std::cout << module.get_method("forward").graph()->toString(false);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"jitckpt: train TorchScript models in less memory with optimal checkpointing"};
  app.require_subcommand(1);

  auto* optimize_command =
      app.add_subcommand("optimize", "rewrite a saved TorchScript module for a memory limit");
  OptimizeOptions o;
  optimize_command->add_option("model", o.input_path, "saved TorchScript module (.pt)")->required();
  optimize_command->add_option(
      "--input,--input-shape", o.inputs,
      "each forward input in order: [DTYPE:]SHAPE[=FILL], e.g. 8,3,224,224 (float32, "
      "random), int64:4,128 (zeros), bool:4,128=1; without any, the module is "
      "planned at its first training call");
  // The planning options, from the same definition as jitckpt.checkpoint's keywords.
  std::vector<std::string> texts(jitckpt::userOptions().size());
  std::vector<CLI::Option*> given;
  for (size_t k = 0; k < texts.size(); ++k) {
    const jitckpt::UserOption& option = jitckpt::userOptions()[k];
    const std::string help =
        option.help +
        (option.default_text.empty() ? std::string() : " (default: " + option.default_text + ")");
    CLI::Option* flag = optimize_command->add_option(jitckpt::flagOf(option), texts[k], help);
    if (!option.choices.empty()) flag->check(CLI::IsMember(option.choices));
    given.push_back(flag);
  }
  optimize_command->add_flag("--eval", o.eval_mode,
                             "plan for the module in eval() mode (default: train())");
  optimize_command->add_option("-o,--output", o.output_path, "where to write the rewritten module")
      ->required();

  auto* inspect_command = app.add_subcommand("inspect", "print the plan of a rewritten module");
  std::string inspect_path;
  bool print_graph = false;
  inspect_command->add_option("model", inspect_path, "rewritten TorchScript module (.pt)")
      ->required();
  inspect_command->add_flag("--graph", print_graph, "also print the rewritten forward graph");
  CLI11_PARSE(app, argc, argv);
  for (size_t k = 0; k < texts.size(); ++k)
    if (given[k]->count() > 0) o.planning[jitckpt::userOptions()[k].name] = texts[k];

  return jitckpt::tools::reportErrors([&] {
    if (*optimize_command) {
      optimize(o);
    } else {
      inspect(inspect_path, print_graph);
    }
  });
}
