// jitckpt-opt: runs one pass on TorchScript IR text or a saved module and prints the result in a
// stable text form, for lit/FileCheck tests (as mlir-opt does).
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <sstream>

#include "passes/partition.h"
#include "passes/print_chain.h"

int main(int argc, char** argv) {
  CLI::App app{
      "jitckpt-opt: run a jitckpt pass on IR text (.ir) or a saved TorchScript file (.pt)"};
  std::string input, pass = "partition";
  int max_stages = 0;
  app.add_option("input", input, "IR text file, saved TorchScript file, or - for IR on stdin")
      ->required();
  app.add_option("--pass", pass, "inline | partition")
      ->check(CLI::IsMember({"inline", "partition"}));
  app.add_option("--max-stages", max_stages, "partition: at most this many stages (0: no limit)");
  bool keep_inplace_cuts = false;
  app.add_flag("--keep-inplace-cuts", keep_inplace_cuts,
               "partition: keep cuts whose boundary is written in place (marks the stage)");
  CLI11_PARSE(app, argc, argv);
  try {
    std::shared_ptr<torch::jit::Graph> graph;
    torch::jit::Module module;  // owns the functions that the graph calls until it is inlined
    const bool saved_module = input.size() > 3 && input.substr(input.size() - 3) == ".pt";
    if (saved_module) {
      module = torch::jit::load(input);
      graph = module.get_method("forward").graph()->copy();
    } else {
      std::stringstream text;
      if (input == "-") {
        text << std::cin.rdbuf();
      } else {
        std::ifstream in(input);
        if (!in) throw std::runtime_error("cannot open '" + input + "'");
        text << in.rdbuf();
      }
      // lit files carry RUN/CHECK lines as comments: keep from the first "graph(" on.
      std::string ir = text.str();
      const auto start = ir.find("graph(");
      if (start == std::string::npos) throw std::runtime_error("no 'graph(' in " + input);
      std::string body;
      std::istringstream lines(ir.substr(start));
      for (std::string line; std::getline(lines, line);) {
        const auto comment = line.find("//");
        body += (comment == std::string::npos ? line : line.substr(0, comment)) + "\n";
      }
      graph = std::make_shared<torch::jit::Graph>();
      torch::jit::parseIR(body, graph.get());
    }
    jitckpt::inlineAllCalls(*graph);
    if (pass == "inline") {
      std::cout << graph->toString(false);
      return 0;
    }
    jitckpt::PartitionOptions options;
    options.max_stages = max_stages;
    options.move_cuts_off_inplace_writes = !keep_inplace_cuts;
    auto partition = jitckpt::partitionGraph(graph, options);
    jitckpt::printPartition(std::cout, partition);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
