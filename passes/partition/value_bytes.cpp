// Value sizes for the partition (see value_bytes.h).
#include "passes/partition/value_bytes.h"

#include <ATen/autocast_mode.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <string>
#include <unordered_map>
#include <utility>

#include "passes/buffer_guard.h"
#include "passes/graph_walk.h"
#include "passes/partition/steps.h"  // attributePath
#include "runtime/error_text.h"
#include "runtime/rng_state.h"

namespace jitckpt {
namespace {

using torch::jit::Graph;
using torch::jit::Value;

// Autocast's cache off for a run without grad, as it was after it. Such a run inside the caller's
// autocast region would cache casts of the weights that do not require grad and hand them to the
// runs under grad that follow (the prologue's on the example inputs, the caller's first step):
// what those compute from them would not require grad.
class UncachedCasts {
 public:
  UncachedCasts() : cache_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~UncachedCasts() { at::autocast::set_autocast_cache_enabled(cache_); }
  UncachedCasts(const UncachedCasts&) = delete;
  UncachedCasts& operator=(const UncachedCasts&) = delete;

 private:
  bool cache_;
};

bool isTensor(const Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; }

// Appends to a graph being built the element count and dtype of the tensors it measures.
class SizeOutputs {
 public:
  explicit SizeOutputs(Graph& graph) : graph_(graph) {}
  void measure(const Value* original, Value* v) {
    measured_.push_back(original);
    sizes_.push_back(graph_.insert(c10::Symbol::aten("numel"), {v}));
    sizes_.push_back(graph_.insert(c10::prim::dtype, {v}));
  }
  // Each output of `n` (copied as `clone`) that holds a tensor. prim::Exit's output is typed
  // Tensor but is whatever __exit__ returned (None): skipped, so that the partition's clear error
  // on `with` blocks is the one the user sees.
  void measureOutputs(const torch::jit::Node* n, torch::jit::Node* clone) {
    for (size_t o = 0; o < n->outputs().size(); ++o) {
      if (isTensor(n->output(o)) && !mayBeUninitialized(n, o) && n->kind() != c10::prim::Exit)
        measure(n->output(o), clone->output(o));
    }
  }
  // Registers the sizes as the graph's outputs; returns the values they measure, in order.
  std::vector<const Value*> finish() {
    for (Value* v : sizes_) graph_.registerOutput(v);
    return std::move(measured_);
  }

 private:
  Graph& graph_;
  std::vector<const Value*> measured_;
  std::vector<Value*> sizes_;
};

// A copy of `graph` that returns, for each top-level tensor of `graph` (in `measured`), its
// element count and dtype.
std::shared_ptr<Graph> instrumentedCopy(const Graph& graph, std::vector<const Value*>& measured) {
  auto copy = std::make_shared<Graph>();
  SizeOutputs sizes(*copy);
  std::unordered_map<const Value*, Value*> env;
  for (const Value* input : graph.inputs()) {
    Value* v = copy->addInput()->copyMetadata(const_cast<Value*>(input));
    env[input] = v;
  }
  for (size_t i = 1; i < graph.inputs().size(); ++i) {
    if (isTensor(graph.inputs()[i])) sizes.measure(graph.inputs()[i], env.at(graph.inputs()[i]));
  }
  for (const torch::jit::Node* n : graph.nodes()) {
    torch::jit::Node* clone = copy->insertNode(
        copy->createClone(const_cast<torch::jit::Node*>(n), [&](Value* v) { return env.at(v); }));
    for (size_t o = 0; o < n->outputs().size(); ++o) env[n->output(o)] = clone->output(o);
    sizes.measureOutputs(n, clone);
  }
  measured = sizes.finish();
  return copy;
}

// The chain region of `partition` as a graph of its own, its inputs the chain inputs and then the
// lifted values, instrumented as instrumentedCopy is; null when the region reads a value from
// before it that is none of those nor a constant.
std::shared_ptr<Graph> instrumentedRegion(const Partition& partition,
                                          std::vector<const Value*>& measured) {
  auto copy = std::make_shared<Graph>();
  SizeOutputs sizes(*copy);
  std::unordered_map<const Value*, Value*> env;
  for (Value* v : partition.chain_inputs) {
    env[v] = copy->addInput()->copyMetadata(v);
    sizes.measure(v, env[v]);
  }
  std::unordered_map<std::string, Value*> attributes;  // an attribute read twice is lifted once
  for (const LiftedInput& l : partition.lifted) {
    env[l.value] = copy->addInput()->copyMetadata(l.value);
    if (l.value->node()->kind() == c10::prim::GetAttr) attributes.emplace(l.name, env[l.value]);
  }
  bool closed = true;
  auto outer = [&](Value* v) -> Value* {
    if (auto it = env.find(v); it != env.end()) return it->second;
    const torch::jit::Node* n = v->node();
    if (n->kind() == c10::prim::GetAttr) {
      auto it = attributes.find(partition_steps::attributePath(v));
      if (it != attributes.end()) return env[v] = it->second;
    } else if (n->kind() == c10::prim::Constant) {
      torch::jit::Node* constant = copy->insertNode(copy->createClone(
          const_cast<torch::jit::Node*>(n), [](Value*) -> Value* { return nullptr; }));
      return env[v] = constant->output();
    }
    closed = false;  // (a placeholder, so that the copy completes)
    return env[v] = copy->insertNode(copy->createUninitialized(v->type()))->output();
  };
  for (torch::jit::Node* n = partition.first_node;; n = n->next()) {
    torch::jit::Node* clone = copy->insertNode(copy->createClone(n, outer));
    for (size_t o = 0; o < n->outputs().size(); ++o) env[n->output(o)] = clone->output(o);
    sizes.measureOutputs(n, clone);
    if (n == partition.last_node) break;
  }
  measured = sizes.finish();
  return closed ? copy : nullptr;
}

// Bytes of each measured value from the stack an instrumented graph returned.
ValueBytes bytesFromSizes(const std::vector<const Value*>& measured,
                          const std::vector<c10::IValue>& stack) {
  TORCH_INTERNAL_ASSERT(stack.size() == 2 * measured.size());
  ValueBytes bytes;
  for (size_t i = 0; i < measured.size(); ++i) {
    const auto dtype = static_cast<c10::ScalarType>(stack[2 * i + 1].toInt());
    bytes[measured[i]] = stack[2 * i].toInt() * static_cast<int64_t>(c10::elementSize(dtype));
  }
  return bytes;
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
    const UncachedCasts uncached;
    try {
      torch::jit::InterpreterState(code).run(stack);
    } catch (const std::exception& e) {  // c10::Error, and the interpreter's own errors
      TORCH_CHECK(false,
                  "running forward on the example inputs failed (do they have the shapes, dtypes "
                  "and devices that the model expects?): ",
                  reasonOf(e));
    }
  }
  return bytesFromSizes(measured, stack);
}

ValueBytes measureChainBytes(const Partition& partition, const ChainStages& stages,
                             const ChainArguments& arguments) {
  if (!partition.first_node || partition.lifted.size() != stages.lifted().size() ||
      partition.chain_inputs.size() != arguments.inputs.size())
    return {};
  for (size_t k = 0; k < stages.lifted().size(); ++k) {
    // (other values are named by the graph, whose copies number them anew)
    const bool attribute = partition.lifted[k].value->node()->kind() == c10::prim::GetAttr;
    if (attribute ? partition.lifted[k].name != stages.lifted()[k].name
                  : (partition.lifted[k].kind == LiftedKind::Side) !=
                        (stages.lifted()[k].kind == LiftedKind::Side))
      return {};
  }
  std::vector<const Value*> measured;
  auto region = instrumentedRegion(partition, measured);
  if (!region) return {};
  at::NoGradGuard no_grad;
  const UncachedCasts uncached;
  std::vector<c10::IValue> stack;
  // (copies: a stage may write its input in place, and the caller's tensors stay as they are)
  for (const at::Tensor& t : arguments.inputs) stack.emplace_back(t.defined() ? t.clone() : t);
  for (size_t k = 0; k < stages.lifted().size(); ++k) {
    const size_t position = stages.position(k);
    if (stages.lifted()[k].kind == LiftedKind::Scalar)
      stack.push_back(arguments.lifted_scalars.at(position));
    else
      stack.emplace_back(arguments.lifted_tensors.at(position));
  }
  std::vector<at::Tensor> written;
  for (int l = 1; l <= stages.size(); ++l) {
    for (size_t k : stages.stage(l).mutated_lifted) {
      if (stages.lifted()[k].kind != LiftedKind::Scalar)
        written.push_back(arguments.lifted_tensors.at(stages.position(k)));
    }
  }
  std::vector<c10::Device> devices;
  if (auto device = chainDevice(arguments); device && !device->is_cpu()) devices.push_back(*device);
  torch::jit::Code code(region, "jitckpt_chain_bytes");
  {
    ModuleBufferGuard buffers(written);
    RngStateGuard rng(devices);
    try {
      torch::jit::InterpreterState(code).run(stack);
    } catch (const std::exception&) {  // the call itself fails, and says why
      return {};
    }
  }
  return bytesFromSizes(measured, stack);
}

}  // namespace jitckpt
