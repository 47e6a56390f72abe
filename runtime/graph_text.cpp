// Stage graphs as IR text (see graph_text.h).
#include "runtime/graph_text.h"

#include <ATen/ops/empty.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <sstream>

namespace jitckpt {
namespace {

// Constants that IR text carries exactly.
bool staysInText(const torch::jit::Node* constant) {
  switch (constant->output()->type()->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::NoneType:
      return true;
    default:
      return false;
  }
}

void collectMovedConstants(torch::jit::Block* block, std::vector<torch::jit::Node*>& out) {
  for (torch::jit::Node* n : block->nodes()) {
    if (n->kind() == c10::prim::Constant && !staysInText(n)) out.push_back(n);
    for (torch::jit::Block* inner : n->blocks()) collectMovedConstants(inner, out);
  }
}

at::Tensor pickled(const c10::IValue& value) {
  const std::vector<char> bytes = torch::jit::pickle_save(value);
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(t.data_ptr<uint8_t>()));
  return t;
}

c10::IValue unpickled(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kByte && t.dim() == 1 && t.is_contiguous(),
              "corrupt jitckpt plan: a pickled constant is not a byte vector");
  const char* data = reinterpret_cast<const char*>(t.data_ptr<uint8_t>());
  return torch::jit::pickle_load(std::vector<char>(data, data + t.numel()));
}

// The printer writes a node without outputs as " = prim::If(...)"; the 1.13 parser reads such a
// node only without the "= ".
std::string parseableText(const torch::jit::Graph& graph) {
  std::istringstream lines(graph.toString(false));
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

}  // namespace

std::string graphToText(torch::jit::Graph& graph, std::vector<at::Tensor>& constants,
                        MovedConstants& moved) {
  auto copy = graph.copy();
  std::vector<torch::jit::Node*> to_move;
  collectMovedConstants(copy->block(), to_move);
  moved = {};
  for (torch::jit::Node* n : to_move) {
    torch::jit::Value* input = copy->addInput();
    input->setType(n->output()->type());
    n->output()->replaceAllUsesWith(input);
    const c10::IValue value = *torch::jit::toIValue(n->output());
    if (value.isTensor()) {
      constants.push_back(value.toTensor());
    } else {
      moved.pickled.push_back(moved.count);
      constants.push_back(pickled(value));
    }
    ++moved.count;
    n->destroy();
  }
  return parseableText(*copy);
}

std::shared_ptr<torch::jit::Graph> graphFromText(const std::string& text,
                                                 const MovedConstants& moved,
                                                 const std::vector<at::Tensor>& constants,
                                                 size_t& next) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(text, graph.get());
  TORCH_CHECK(static_cast<int64_t>(graph->inputs().size()) >= moved.count,
              "corrupt jitckpt plan: a stage graph has fewer inputs than moved constants");
  const size_t first = graph->inputs().size() - static_cast<size_t>(moved.count);
  for (int64_t k = 0; k < moved.count; ++k) {
    TORCH_CHECK(next < constants.size(), "corrupt jitckpt plan: missing constants");
    const bool is_pickled =
        std::find(moved.pickled.begin(), moved.pickled.end(), k) != moved.pickled.end();
    const c10::IValue value =
        is_pickled ? unpickled(constants[next]) : c10::IValue(constants[next]);
    ++next;
    torch::jit::Value* input = graph->inputs()[first];
    torch::jit::WithInsertPoint guard(graph->block()->nodes().front());
    torch::jit::Value* constant = graph->insertConstant(value);
    constant->setType(input->type());
    input->replaceAllUsesWith(constant);
    graph->eraseInput(first);
  }
  return graph;
}

}  // namespace jitckpt
