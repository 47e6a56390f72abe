// The prologue (see prologue.h).
#include "passes/prologue.h"

#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/script.h>

#include <unordered_map>
#include <unordered_set>

#include "passes/buffer_guard.h"
#include "passes/example_copies.h"
#include "passes/keep_draws.h"
#include "runtime/probes/memory_probe.h"

namespace jitckpt {
namespace {

ChainArguments splitArguments(const Partition& partition, const std::vector<c10::IValue>& stack) {
  ChainArguments arguments;
  size_t i = 0;
  for (; i < partition.chain_inputs.size(); ++i) {
    TORCH_CHECK(stack[i].isTensor(), "chain input ", i, " is a ", stack[i].tagKind(),
                " for these example inputs, not a tensor");
    const at::Tensor t = stack[i].toTensor();
    arguments.inputs.push_back(t.detach().requires_grad_(t.requires_grad()));
  }
  for (const LiftedInput& l : partition.lifted) {
    const c10::IValue& v = stack[i++];
    if (l.kind == LiftedKind::Scalar) {
      arguments.lifted_scalars.push_back(v);
    } else {
      // None: an Optional[Tensor] attribute without a value, kept as an undefined tensor.
      TORCH_CHECK(v.isTensor() || v.isNone(), "attribute '", l.name, "' is a ", v.tagKind(),
                  " at run time, where the partition expected a tensor");
      arguments.lifted_tensors.push_back(v.isNone() ? at::Tensor() : v.toTensor());
    }
  }
  return arguments;
}

// Calls f on every tensor inside `values` (lists, tuples, dicts and objects' attributes too).
void forEachTensor(const std::vector<c10::IValue>& values,
                   const std::function<void(const at::Tensor&)>& f) {
  for (const c10::IValue& v : values) {
    v.visit([&](const c10::IValue& inner) {
      if (inner.isTensor() && inner.toTensor().defined()) f(inner.toTensor());
      return false;  // (and go on into what it holds)
    });
  }
}

// The device the prologue's memory is measured on: that of the first tensor off the CPU among the
// examples and the module's attributes, else the CPU.
c10::Device measuredDevice(const std::vector<c10::IValue>& values) {
  c10::Device device(c10::kCPU);
  forEachTensor(values, [&](const at::Tensor& t) {
    if (device.is_cpu() && !t.is_cpu()) device = t.device();
  });
  return device;
}

// Bytes live after the prologue's run (`live`, its outputs and their autograd graph held) besides
// the storages of the chain's arguments that it made: what the forward holds from before the
// chain beyond heldFromStart. `before`: the values the run began with (self, the examples).
int64_t heldBeyondArguments(int64_t live, const std::vector<c10::IValue>& before,
                            const std::vector<c10::IValue>& outputs) {
  std::unordered_set<const c10::StorageImpl*> existing;
  forEachTensor(before, [&](const at::Tensor& t) {
    if (t.has_storage()) existing.insert(t.storage().unsafeGetStorageImpl());
  });
  Tensors made;
  forEachTensor(outputs, [&](const at::Tensor& t) {
    if (t.has_storage() && !existing.count(t.storage().unsafeGetStorageImpl())) made.push_back(t);
  });
  return std::max<int64_t>(0, live - probes::storageBytes(made));
}

}  // namespace

std::shared_ptr<torch::jit::Graph> prologueGraph(const Partition& partition,
                                                 const std::vector<torch::jit::Value*>& outputs) {
  using torch::jit::Value;
  TORCH_INTERNAL_ASSERT(partition.graph && partition.first_node,
                        "prologueGraph: the partition has no chain region");
  auto prologue = std::make_shared<torch::jit::Graph>();
  std::unordered_map<Value*, Value*> env;
  for (Value* input : partition.graph->inputs())
    env[input] = prologue->addInput()->copyMetadata(input);
  for (torch::jit::Node* n : partition.graph->nodes()) {
    if (n == partition.first_node) break;
    torch::jit::Node* copy =
        prologue->insertNode(prologue->createClone(n, [&](Value* v) { return env.at(v); }));
    for (size_t o = 0; o < n->outputs().size(); ++o) env[n->output(o)] = copy->output(o);
  }
  for (Value* v : outputs) {
    auto it = env.find(v);
    TORCH_INTERNAL_ASSERT(it != env.end(), "prologueGraph: value %", v->debugName(),
                          " is not defined before the chain region");
    prologue->registerOutput(it->second);
  }
  eliminateDeadCodeKeepingDraws(prologue);
  return prologue;
}

PrologueRun runPrologue(const torch::jit::Module& module, const Partition& partition,
                        const std::vector<c10::IValue>& example_inputs) {
  const size_t expected = partition.graph->inputs().size() - 1;
  TORCH_CHECK(example_inputs.size() == expected, "example inputs: forward takes ", expected,
              " input(s) besides self, but ", example_inputs.size(), " were given");
  std::vector<torch::jit::Value*> outputs = partition.chain_inputs;
  for (const LiftedInput& l : partition.lifted) outputs.push_back(l.value);
  torch::jit::Code code(prologueGraph(partition, outputs), "jitckpt_prologue");
  std::vector<c10::IValue> stack{module._ivalue()};
  const std::vector<c10::IValue> examples = examplesToRunOn(partition.graph, example_inputs);
  stack.insert(stack.end(), examples.begin(), examples.end());
  const std::vector<c10::IValue> before = stack;
  // (made before the run: on the CPU the probe counts what is allocated while it exists)
  auto probe = probes::makeMemoryProbe(measuredDevice(before));
  const int64_t base = probe->currentBytes();
  {
    ModuleBufferGuard buffers(module);
    torch::AutoGradMode grad_mode(true);
    try {
      torch::jit::InterpreterState(code).run(stack);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "running forward up to the chain on the example inputs failed: ",
                  e.what_without_backtrace());
    }
  }
  TORCH_INTERNAL_ASSERT(stack.size() == outputs.size(), "runPrologue: the prologue returned ",
                        stack.size(), " values");
  PrologueRun run;
  run.held_beyond_bytes = heldBeyondArguments(probe->currentBytes() - base, before, stack);
  run.arguments = splitArguments(partition, stack);
  return run;
}

}  // namespace jitckpt
