// jitckpt-opt: runs one graph pass, by name, on TorchScript IR text or a saved module and prints
// the result in a stable text form, for lit/FileCheck tests (as mlir-opt does). Passes:
//   inline     the forward graph with every call inlined
//   partition  the chain of stages (passes/partition/print.h)
//   rewrite    the rewritten forward graph, then its plan; a saved module only (the rewrite needs
//              the module), planned with zero costs and the no-checkpointing schedule, since the
//              rewrite does not depend on the schedule
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/script.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "passes/inline_calls.h"
#include "passes/partition/module.h"
#include "passes/partition/partition.h"
#include "passes/partition/print.h"
#include "passes/rewrite.h"
#include "planner/solve.h"
#include "runtime/error_text.h"
#include "tools/common/example_inputs.h"
#include "tools/common/report_errors.h"

namespace {

struct Input {
  std::shared_ptr<torch::jit::Graph> graph;  // forward, a copy, not inlined
  std::optional<torch::jit::Module> module;  // a saved module; it owns the functions it calls
  std::vector<c10::IValue> example_inputs;   // --input-shape: cuts by bytes (modules only)
};

// lit files carry RUN/CHECK lines as comments: keep from the first "graph(" on.
std::shared_ptr<torch::jit::Graph> parseIrText(const std::string& text, const std::string& name) {
  const auto start = text.find("graph(");
  if (start == std::string::npos) throw std::runtime_error("no 'graph(' in " + name);
  std::string body;
  std::istringstream lines(text.substr(start));
  for (std::string line; std::getline(lines, line);) {
    const auto comment = line.find("//");
    body += (comment == std::string::npos ? line : line.substr(0, comment)) + "\n";
  }
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(body, graph.get());
  return graph;
}

Input readInput(const std::string& path) {
  Input input;
  if (path.size() > 3 && path.substr(path.size() - 3) == ".pt") {
    try {
      input.module = torch::jit::load(path);
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot load '" + path + "' as a TorchScript module (" +
                               jitckpt::reasonOf(e) + ")");
    }
    input.graph = input.module->get_method("forward").graph()->copy();
    return input;
  }
  std::stringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open '" + path + "'");
    text << in.rdbuf();
  }
  input.graph = parseIrText(text.str(), path);
  return input;
}

void runInline(Input& input, const jitckpt::PartitionOptions&) {
  jitckpt::inlineAllCalls(input.graph);
  std::cout << input.graph->toString(false);
}

void runPartition(Input& input, const jitckpt::PartitionOptions& options) {
  if (input.module) {
    jitckpt::printPartition(std::cout,
                            jitckpt::partitionModule(*input.module, options, input.example_inputs));
    return;
  }
  if (!input.example_inputs.empty())
    throw std::runtime_error("--input-shape needs a saved module (.pt)");
  jitckpt::inlineAllCalls(input.graph);
  jitckpt::printPartition(std::cout, jitckpt::partitionGraph(input.graph, options));
}

void runRewrite(Input& input, const jitckpt::PartitionOptions& options) {
  if (!input.module) throw std::runtime_error("--pass rewrite needs a saved module (.pt)");
  jitckpt::PartitionedClone cloned =
      jitckpt::partitionClone(*input.module, options, /*share_tensors=*/true, input.example_inputs);
  auto stages = jitckpt::chainStagesOf(cloned.partition);
  jitckpt::solver::Costs zero;
  for (auto* v : {&zero.uf, &zero.ub}) v->assign(stages->size() + 2, 0);
  for (auto* v : {&zero.wa, &zero.wabar, &zero.wd, &zero.of, &zero.ob})
    v->assign(stages->size() + 2, 0);
  auto plan = c10::make_intrusive<jitckpt::Plan>(
      stages, jitckpt::solveCosts(zero, jitckpt::solver::MemoryLimit::unlimited(),
                                  {jitckpt::solver::Strategy::None, 500, 0}));
  jitckpt::rewriteChain(cloned.module, cloned.partition, plan);
  std::cout << cloned.module.get_method("forward").graph()->toString(false) << "\n" << plan->str();
}

}  // namespace

int main(int argc, char** argv) {
  using Pass = std::function<void(Input&, const jitckpt::PartitionOptions&)>;
  const std::map<std::string, Pass> passes = {
      {"inline", runInline}, {"partition", runPartition}, {"rewrite", runRewrite}};
  CLI::App app{
      "jitckpt-opt: run a jitckpt pass on IR text (.ir) or a saved TorchScript file (.pt)"};
  std::string path, pass = "partition";
  jitckpt::PartitionOptions options;
  bool keep_inplace_cuts = false;
  app.add_option("file", path, "IR text file, saved TorchScript file, or - for IR on stdin")
      ->required();
  app.add_option("--pass", pass, "inline | partition | rewrite")
      ->check(CLI::IsMember({"inline", "partition", "rewrite"}));
  app.add_option("--max-stages", options.max_stages,
                 "partition: at most this many stages (0: no limit)");
  app.add_flag("--every-cut", options.every_cut,
               "partition: every cut between two heavy ops that carries new tensors, not only the "
               "cheapest");
  app.add_flag("--keep-inplace-cuts", keep_inplace_cuts,
               "partition: keep cuts whose boundary is written in place (marks the stage)");
  std::vector<std::string> input_shapes;
  app.add_option("--input,--input-shape", input_shapes,
                 "partition, rewrite: an example input, once per forward input: "
                 "[DTYPE:]SHAPE[=FILL] such as 2,3,8,8 or int64:4,16; cuts are then chosen by "
                 "the bytes they carry");
  CLI11_PARSE(app, argc, argv);
  options.move_cuts_off_inplace_writes = !keep_inplace_cuts;
  return jitckpt::tools::reportErrors([&] {
    Input input = readInput(path);
    for (const auto& shape : input_shapes)
      input.example_inputs.emplace_back(jitckpt::tools::exampleInput(shape));
    passes.at(pass)(input, options);
  });
}
