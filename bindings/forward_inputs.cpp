// See forward_inputs.h.
#include "bindings/forward_inputs.h"

#include <torch/csrc/jit/python/pybind_utils.h>

#include "passes/example_copies.h"

namespace jitckpt::bindings {

std::vector<c10::IValue> forwardInputs(const torch::jit::Module& module,
                                       const pybind11::sequence& inputs) {
  const auto& graph_inputs = module.get_method("forward").graph()->inputs();
  if (inputs.size() == 0) return {};
  TORCH_CHECK(inputs.size() + 1 <= graph_inputs.size(), "forward takes ", graph_inputs.size() - 1,
              " input(s) besides self, but ", inputs.size(), " were given");
  const auto& arguments = module.get_method("forward").function().getSchema().arguments();
  std::vector<c10::IValue> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // pybind reads None as an undefined tensor, which fails later without a name.
    TORCH_CHECK(
        !(inputs[i].is_none() && graph_inputs[i + 1]->type()->kind() == c10::TypeKind::TensorType),
        "example input ", i, " is None, but forward's argument '", arguments.at(i + 1).name(),
        "' is a Tensor: pass a tensor of the shape, dtype and device that training passes");
    values.push_back(torch::jit::toIValue(inputs[i], graph_inputs[i + 1]->type()));
  }
  return withForwardDefaults(module, std::move(values));
}

}  // namespace jitckpt::bindings
