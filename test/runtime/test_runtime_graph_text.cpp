// Stage graphs as IR text (runtime/graph_text.h): every kind of constant comes back exactly.
#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/script.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/graph_text.h"

namespace jitckpt::test {
namespace {

using torch::jit::Graph;
using torch::jit::Value;

std::vector<c10::IValue> run(const std::shared_ptr<Graph>& graph, bool flag) {
  torch::jit::Code code(graph, "graph_text_test");
  torch::jit::Stack stack{c10::IValue(flag)};
  torch::jit::InterpreterState(code).run(stack);
  return stack.at(0).toTupleRef().elements().vec();
}

// Equal bit for bit: doubles (NaN, -0.0) by their bits, tensors by value and dtype.
bool identical(const c10::IValue& a, const c10::IValue& b) {
  if (a.isDouble() && b.isDouble()) {
    const double x = a.toDouble(), y = b.toDouble();
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  if (a.isTensor() && b.isTensor())
    return a.toTensor().dtype() == b.toTensor().dtype() && torch::equal(a.toTensor(), b.toTensor());
  if (a.isTuple() && b.isTuple()) {
    const auto& x = a.toTupleRef().elements();
    const auto& y = b.toTupleRef().elements();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!identical(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.isDoubleList() && b.isDoubleList()) {
    const auto x = a.toDoubleVector(), y = b.toDoubleVector();
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
  }
  return a.tagKind() == b.tagKind() && a == b;
}

// Infinities, NaN, -0.0, subnormal and largest doubles, a double that needs 17 digits, complex,
// strings with quotes, escapes and newlines, devices, tuples, lists (one holding -inf), tensors,
// negative ints, bools and None: each returned by a graph, some from inside an If's blocks.
TEST(RuntimeGraphText, EveryConstantRoundTripsBitForBit) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<c10::IValue> values = {
      inf,
      -inf,
      std::numeric_limits<double>::quiet_NaN(),
      -0.0,
      std::numeric_limits<double>::denorm_min(),
      std::numeric_limits<double>::max(),
      0.1,
      c10::complex<double>(1.5, -2.0),
      std::string("a \"quoted\" \\ string\n\twith 'both' quotes"),
      c10::Device("cuda:1"),
      c10::ivalue::Tuple::create({c10::IValue(int64_t{1}), c10::IValue(std::string("t"))}),
      c10::List<double>({0.5, -inf}),
      c10::List<int64_t>({-1, 3}),
      c10::List<std::string>({"x", "y\n"}),
      torch::arange(6, at::kDouble).reshape({2, 3}),
      int64_t{-7},
      true,
      c10::IValue(),
  };
  auto graph = std::make_shared<Graph>();
  Value* flag = graph->addInput("flag")->setType(c10::BoolType::get());
  std::vector<Value*> outputs;
  for (const c10::IValue& v : values) outputs.push_back(graph->insertConstant(v));
  // Constants inside nested blocks: -inf in one branch, NaN in the other.
  torch::jit::Node* branch = graph->insertNode(graph->create(c10::prim::If, 1));
  branch->addInput(flag);
  branch->output()->setType(c10::FloatType::get());
  for (const double d : {-inf, std::numeric_limits<double>::quiet_NaN()}) {
    torch::jit::Block* block = branch->addBlock();
    torch::jit::WithInsertPoint inside(block);
    block->registerOutput(graph->insertConstant(d));
  }
  outputs.push_back(branch->output());
  graph->registerOutput(graph->insertNode(graph->createTuple(outputs))->output());

  std::vector<at::Tensor> constants;
  MovedConstants moved;
  const std::string text = graphToText(*graph, constants, moved);
  EXPECT_EQ(moved.count, static_cast<int64_t>(constants.size()));
  size_t next = 0;
  auto back = graphFromText(text, moved, constants, next);
  EXPECT_EQ(next, constants.size());
  ASSERT_EQ(back->inputs().size(), 1u) << *back;
  for (const bool f : {true, false}) {
    const auto want = run(graph, f), got = run(back, f);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(identical(want[i], got[i]))
          << "value " << i << " (flag " << f << "): " << want[i] << " came back as " << got[i];
    }
  }
}

}  // namespace
}  // namespace jitckpt::test
