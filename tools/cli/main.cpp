// jitckpt: the command line. `optimize` rewrites a saved TorchScript module for a memory limit so
// that a training script changes nothing but the file it loads; `inspect` prints a rewritten
// file's plan.
#include <CLI/CLI.hpp>

#include <torch/script.h>

#include <iostream>
#include <sstream>

#include "passes/checkpoint.h"
#include "passes/solver/memory_size.h"
#include "runtime/plan.h"

namespace {

std::vector<int64_t> parseShape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    try {
      size_t used = 0;
      const long long dim = std::stoll(part, &used);
      if (used != part.size() || dim < 1) throw std::invalid_argument("");
      shape.push_back(dim);
    } catch (const std::exception&) {
      throw std::invalid_argument("input shape '" + text + "' must be positive integers separated by commas, "
                                  "such as 8,3,224,224");
    }
  }
  if (shape.empty()) throw std::invalid_argument("empty input shape");
  return shape;
}

torch::jit::Module loadModule(const std::string& path) {
  try {
    return torch::jit::load(path);
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    throw std::runtime_error("cannot load '" + path + "' as a TorchScript module (" + what +
                             "); save one with torch.jit.save(torch.jit.script(model), path)");
  }
}

c10::intrusive_ptr<jitckpt::Plan> planOf(const torch::jit::Module& module, const std::string& path) {
  if (!module.hasattr(jitckpt::kPlanAttribute)) {
    throw std::runtime_error("'" + path + "' was not rewritten by jitckpt; run `jitckpt optimize` on it first");
  }
  return module.attr(jitckpt::kPlanAttribute).toCustomClass<jitckpt::Plan>();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"jitckpt: train TorchScript models in less memory with optimal checkpointing"};
  app.require_subcommand(1);

  auto* optimize = app.add_subcommand("optimize", "rewrite a saved TorchScript module for a memory limit");
  std::string input_path, output_path, limit_text = "0.5", strategy = "optimal";
  std::vector<std::string> shapes;
  int slots = 500, max_stages = 0, segments = 0;
  bool eval_mode = false;
  optimize->add_option("model", input_path, "saved TorchScript module (.pt)")->required();
  optimize->add_option("--input-shape", shapes, "shape of each forward input, e.g. 8,3,224,224 (float32)")
      ->required();
  optimize->add_option("--memory-limit", limit_text,
                       "activation memory: bytes (2GiB, 512MiB) or a fraction of the unconstrained peak (0.5, 50%)");
  optimize->add_option("--strategy", strategy, "optimal, periodic, revolve or none")
      ->check(CLI::IsMember({"optimal", "periodic", "revolve", "none"}));
  optimize->add_option("--slots", slots, "memory slots of the solver")->check(CLI::Range(1, 100000));
  optimize->add_option("--segments", segments, "periodic: segment count (default: the fastest that fits)");
  optimize->add_option("--max-stages", max_stages, "at most this many stages (0: no limit)");
  optimize->add_flag("--eval", eval_mode, "plan for the module in eval() mode (default: train())");
  optimize->add_option("-o,--output", output_path, "where to write the rewritten module")->required();

  auto* inspect = app.add_subcommand("inspect", "print the plan of a rewritten module");
  std::string inspect_path;
  bool print_graph = false;
  inspect->add_option("model", inspect_path, "rewritten TorchScript module (.pt)")->required();
  inspect->add_flag("--graph", print_graph, "also print the rewritten forward graph");
  CLI11_PARSE(app, argc, argv);

  try {
    if (*optimize) {
      torch::jit::Module module = loadModule(input_path);
      module.train(!eval_mode);
      std::vector<c10::IValue> inputs;
      for (const auto& shape : shapes) inputs.push_back(torch::randn(parseShape(shape)));
      jitckpt::CheckpointOptions options;
      options.slots = slots;
      options.strategy = jitckpt::parseStrategy(strategy);
      options.segments = segments;
      options.max_stages = max_stages;
      torch::jit::Module rewritten =
          jitckpt::checkpoint(module, inputs, jitckpt::MemoryLimit::parse(limit_text), options);
      rewritten.save(output_path);
      const auto plan = planOf(rewritten, output_path);
      std::cout << "wrote " << output_path << ": " << plan->numStages() << " stages, strategy " << plan->strategy
                << ", predicted activation peak " << jitckpt::solver::formatBytes(plan->predicted_peak) << " of "
                << jitckpt::solver::formatBytes(plan->unconstrained_peak) << " unconstrained, predicted time "
                << plan->predicted_time << " ms\n";
    } else {
      torch::jit::Module module = loadModule(inspect_path);
      const auto plan = planOf(module, inspect_path);
      std::cout << plan->str();
      if (!plan->curve.empty()) {
        std::cout << "time-memory curve (optimal): " << plan->curve.size() << " points, from "
                  << jitckpt::solver::formatBytes(plan->curve.front().limit) << " (" << plan->curve.front().time
                  << " ms) to " << jitckpt::solver::formatBytes(plan->curve.back().limit) << " ("
                  << plan->curve.back().time << " ms)\n";
      }
      if (print_graph) std::cout << module.get_method("forward").graph()->toString(false);
    }
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
