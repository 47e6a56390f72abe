// Value sizes for the partition (see value_bytes.h).
#include "passes/partition/value_bytes.h"

#include <c10/core/ScalarType.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <unordered_map>
#include <utility>

#include "passes/buffer_guard.h"
#include "passes/graph_walk.h"
#include "runtime/error_text.h"
#include "runtime/rng_state.h"

namespace jitckpt {
namespace {

using torch::jit::Graph;
using torch::jit::Value;

bool isTensor(const Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; }

// A copy of `graph` that returns, for each top-level tensor of `graph` (in `measured`), its
// element count and dtype.
std::shared_ptr<Graph> instrumentedCopy(const Graph& graph, std::vector<const Value*>& measured) {
  auto copy = std::make_shared<Graph>();
  std::unordered_map<const Value*, Value*> env;
  std::vector<Value*> sizes;
  auto measure = [&](const Value* original, Value* v) {
    measured.push_back(original);
    sizes.push_back(copy->insert(c10::Symbol::aten("numel"), {v}));
    sizes.push_back(copy->insert(c10::prim::dtype, {v}));
  };
  for (const Value* input : graph.inputs()) {
    Value* v = copy->addInput()->copyMetadata(const_cast<Value*>(input));
    env[input] = v;
  }
  for (size_t i = 1; i < graph.inputs().size(); ++i) {
    if (isTensor(graph.inputs()[i])) measure(graph.inputs()[i], env.at(graph.inputs()[i]));
  }
  for (const torch::jit::Node* n : graph.nodes()) {
    torch::jit::Node* clone = copy->insertNode(
        copy->createClone(const_cast<torch::jit::Node*>(n), [&](Value* v) { return env.at(v); }));
    for (size_t o = 0; o < n->outputs().size(); ++o) {
      env[n->output(o)] = clone->output(o);
      // prim::Exit's output is typed Tensor but is whatever __exit__ returned (None): skipped, so
      // that the partition's clear error on `with` blocks is the one the user sees
      if (isTensor(n->output(o)) && !mayBeUninitialized(n, o) && n->kind() != c10::prim::Exit)
        measure(n->output(o), clone->output(o));
    }
  }
  for (Value* v : sizes) copy->registerOutput(v);
  return copy;
}

}  // namespace

ValueBytes measureValueBytes(const torch::jit::Module& module, const Graph& graph,
                             const std::vector<c10::IValue>& example_inputs) {
  TORCH_CHECK(example_inputs.size() + 1 == graph.inputs().size(), "example inputs: forward takes ",
              graph.inputs().size() - 1, " input(s) besides self, but ", example_inputs.size(),
              " were given");
  std::vector<const Value*> measured;
  torch::jit::Code code(instrumentedCopy(graph, measured), "jitckpt_value_bytes");
  std::vector<c10::IValue> stack{module._ivalue()};
  stack.insert(stack.end(), example_inputs.begin(), example_inputs.end());
  {
    ModuleBufferGuard buffers(module);
    std::vector<c10::Device> devices;
    for (const auto& v : example_inputs) {
      if (v.isTensor() && !v.toTensor().is_cpu()) devices.push_back(v.toTensor().device());
    }
    RngStateGuard rng(devices);
    at::NoGradGuard no_grad;
    try {
      torch::jit::InterpreterState(code).run(stack);
    } catch (const std::exception& e) {  // c10::Error, and the interpreter's own errors
      TORCH_CHECK(false,
                  "running forward on the example inputs failed (do they have the shapes, dtypes "
                  "and devices that the model expects?): ",
                  reasonOf(e));
    }
  }
  TORCH_INTERNAL_ASSERT(stack.size() == 2 * measured.size());
  ValueBytes bytes;
  for (size_t i = 0; i < measured.size(); ++i) {
    const auto dtype = static_cast<c10::ScalarType>(stack[2 * i + 1].toInt());
    bytes[measured[i]] = stack[2 * i].toInt() * static_cast<int64_t>(c10::elementSize(dtype));
  }
  return bytes;
}

}  // namespace jitckpt
