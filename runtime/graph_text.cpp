// Stage graphs as IR text (see graph_text.h).
#include "runtime/graph_text.h"

#include <torch/csrc/jit/ir/irparser.h>

#include <sstream>

namespace jitckpt {

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

}  // namespace jitckpt
