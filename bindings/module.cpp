// jitckpt._C: the pybind11 module. Partitioning here (stage information, the printed partition,
// a piecewise run of the partitioned method for tests); the checkpoint API in api.cpp.
#include "passes/partition/module.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <sstream>

#include "bindings/captured_module.h"
#include "bindings/forward_inputs.h"
#include "bindings/partition_run.h"
#include "bindings/python_warnings.h"
#include "passes/inline_calls.h"
#include "passes/partition/partition.h"
#include "passes/partition/print.h"

namespace py = pybind11;

void defineCheckpointApi(py::module_& m);  // api.cpp

namespace {

// Accepts a torch.jit.ScriptModule (or its `_c`).
torch::jit::Module toModule(const py::object& module) {
  py::object c = py::hasattr(module, "_c") ? module.attr("_c") : module;
  return py::cast<torch::jit::Module>(c);
}

jitckpt::PartitionOptions makeOptions(int max_stages, bool move_cuts_off_inplace_writes,
                                      bool every_cut) {
  jitckpt::PartitionOptions options;
  options.max_stages = max_stages;
  options.every_cut = every_cut;
  options.move_cuts_off_inplace_writes = move_cuts_off_inplace_writes;
  return options;
}

py::dict describe(const jitckpt::Partition& partition) {
  py::list labels, inputs, writes, mutated;
  for (const auto& stage : partition.stages) {
    labels.append(stage.label);
    inputs.append(stage.num_activation_inputs);
    writes.append(stage.writes_activation_input);
    py::list names;
    for (size_t k : stage.mutated_lifted) names.append(partition.lifted[k].name);
    mutated.append(names);
  }
  py::list lifted;
  for (const auto& l : partition.lifted)
    lifted.append(py::make_tuple(l.name, jitckpt::toString(l.kind)));
  std::ostringstream text;
  jitckpt::printPartition(text, partition);
  py::dict d;
  d["num_stages"] = partition.stages.size();
  d["labels"] = labels;
  d["num_activation_inputs"] = inputs;
  d["num_chain_outputs"] = partition.chain_outputs.size();
  d["writes_activation_input"] = writes;
  d["mutated_lifted"] = mutated;
  d["lifted"] = lifted;
  d["warnings"] = partition.warnings;
  d["boundary_bytes"] = partition.boundary_bytes;
  d["bytes_measured"] = partition.bytes_measured;
  d["text"] = text.str();
  return d;
}

// The graph-level steps in the form of torch._C._jit_pass_*: they take a torch._C.Graph and edit it
// in place, so they compose with PyTorch's own passes. jitckpt.partition(module) is
// _jit_pass_jitckpt_inline_calls, _jit_pass_jitckpt_bind_tensor_lists, then
// _jit_pass_jitckpt_partition, on a copy of module.forward.graph.
void defineGraphPasses(py::module_& m) {
  using GraphPtr = std::shared_ptr<torch::jit::Graph>;
  m.def(
      "_jit_pass_jitckpt_inline_calls",
      [](const GraphPtr& graph) { jitckpt::inlineAllCalls(graph); }, py::arg("graph"),
      "Inlines every method and function call, nested ones included.");
  m.def(
      "_jit_pass_jitckpt_bind_tensor_lists",
      [](const py::object& module, const GraphPtr& graph) {
        jitckpt::bindTensorListAttributes(toModule(module), *graph);
      },
      py::arg("module"), py::arg("graph"),
      "Rebuilds reads of Tensor[] attributes made of the owner's parameters (an RNN's "
      "_flat_weights) from reads of those parameters, in `module`'s inlined forward graph.");
  m.def(
      "_jit_pass_jitckpt_partition",
      [](const GraphPtr& graph, int max_stages, bool move_cuts_off_inplace_writes, bool every_cut) {
        jitckpt::PythonWarnings warnings;
        auto partition = jitckpt::partitionGraph(
            graph, makeOptions(max_stages, move_cuts_off_inplace_writes, every_cut));
        return describe(partition);
      },
      py::arg("graph"), py::arg("max_stages") = 0, py::arg("move_cuts_off_inplace_writes") = true,
      py::arg("every_cut") = false,
      "Partitions an inlined forward graph in place (hoists what the chain reads before it) and "
      "returns the stages as jitckpt._C.partition does, cuts chosen by tensor count.");
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "jitckpt C++ bindings";
  defineCheckpointApi(m);
  defineGraphPasses(m);
  m.def(
      "build_captured_module",
      [](const std::string& name, const py::list& state, const py::list& inputs,
         const py::list& calls, const py::list& outputs) {
        jitckpt::PythonWarnings warnings;
        return jitckpt::bindings::buildCapturedModule(name, state, inputs, calls, outputs);
      },
      py::arg("name"), py::arg("state"), py::arg("inputs"), py::arg("calls"), py::arg("outputs"),
      "The TorchScript IR module of a graph torch.export captured, as "
      "jitckpt/export/aten_graph.py encodes it (bindings/captured_module.h).");
  m.def("build_autocast_block", &jitckpt::bindings::buildAutocastBlock, py::arg("num_inputs"),
        py::arg("calls"), py::arg("outputs"), py::arg("device"), py::arg("enabled"),
        py::arg("dtype"), py::arg("cache_enabled"),
        "Registers a torch.autocast block of a captured graph as a jitckpt::autocast_block; "
        "returns its number (bindings/captured_module.h).");
  m.def(
      "partition",
      [](const py::object& module, const py::sequence& example_inputs, int max_stages,
         bool move_cuts_off_inplace_writes, bool every_cut) {
        jitckpt::PythonWarnings warnings;
        const auto ts_module = toModule(module);
        const auto inputs = jitckpt::bindings::forwardInputs(ts_module, example_inputs);
        py::gil_scoped_release no_gil;
        auto partition = jitckpt::partitionModule(
            ts_module, makeOptions(max_stages, move_cuts_off_inplace_writes, every_cut), inputs);
        py::gil_scoped_acquire gil;
        return describe(partition);
      },
      py::arg("module"), py::arg("example_inputs") = py::tuple(), py::arg("max_stages") = 0,
      py::arg("move_cuts_off_inplace_writes") = true, py::arg("every_cut") = false,
      "Partitions module.forward, choosing cuts by the bytes they carry on the example inputs "
      "(by tensor count without them); returns a dict: num_stages, labels, "
      "num_activation_inputs, num_chain_outputs, writes_activation_input, mutated_lifted, lifted, "
      "warnings, boundary_bytes, bytes_measured, text.");
  m.def(
      "run_partitioned",
      [](const py::object& module, const py::tuple& inputs, int max_stages,
         bool move_cuts_off_inplace_writes, bool every_cut) {
        jitckpt::PythonWarnings warnings;
        const auto ts_module = toModule(module);
        const auto partition = jitckpt::partitionModule(
            ts_module, makeOptions(max_stages, move_cuts_off_inplace_writes, every_cut));
        std::vector<c10::IValue> method_inputs{ts_module._ivalue()};
        for (auto& v : jitckpt::bindings::forwardInputs(ts_module, inputs))
          method_inputs.push_back(std::move(v));
        jitckpt::PartitionedRun run;
        {
          py::gil_scoped_release no_gil;
          run = jitckpt::runPartitioned(partition, std::move(method_inputs));
        }
        TORCH_CHECK(run.outputs.size() == 1, "run_partitioned: expected one method output");
        return py::make_tuple(torch::jit::toPyObject(run.outputs[0]), run.boundaries);
      },
      py::arg("module"), py::arg("inputs"), py::arg("max_stages") = 0,
      py::arg("move_cuts_off_inplace_writes") = true, py::arg("every_cut") = false,
      "Runs forward piecewise (prologue, each stage graph alone, epilogue); returns (output, "
      "boundaries), boundaries[l] being the tensors entering stage l (the last: chain outputs).");
}
