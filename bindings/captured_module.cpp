// The TorchScript IR module of a captured graph (see captured_module.h).
#include "bindings/captured_module.h"

#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/frontend/schema_matching.h>
#include <torch/csrc/jit/ir/named_value.h>
#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <memory>
#include <vector>

#include "runtime/autocast_block.h"

namespace py = pybind11;

namespace jitckpt::bindings {
namespace {

using c10::TypePtr;
using torch::jit::Graph;
using torch::jit::NamedValue;
using torch::jit::Value;

// torch, imported once and kept for the process (a static py::object would be released after
// the interpreter ends).
const py::module_& torchModule() {
  static const auto* torch = new py::module_(py::module_::import("torch"));
  return *torch;
}

bool isValueRef(py::handle object) { return py::hasattr(object, "jitckpt_value_ref"); }

bool holdsValueRef(py::handle object) {
  if (isValueRef(object)) return true;
  if (!py::isinstance<py::list>(object) && !py::isinstance<py::tuple>(object)) return false;
  for (py::handle item : object)
    if (holdsValueRef(item)) return true;
  return false;
}

TypePtr typeNamed(const std::string& name) {
  if (name == "Tensor") return c10::TensorType::get();
  if (name == "int") return c10::IntType::get();
  if (name == "float") return c10::FloatType::get();
  if (name == "bool") return c10::BoolType::get();
  if (name == "str") return c10::StringType::get();
  TORCH_CHECK(false, "jitckpt cannot take a forward argument of type ", name,
              " through torch.export: pass tensors, numbers, booleans or strings");
}

// The TorchScript type of a Python constant as export records it in a call's arguments.
TypePtr inferredType(py::handle object) {
  const py::module_& torch = torchModule();
  if (object.is_none()) return c10::NoneType::get();
  if (py::isinstance<py::bool_>(object)) return c10::BoolType::get();
  if (py::isinstance<py::int_>(object)) return c10::IntType::get();
  if (py::isinstance<py::float_>(object)) return c10::FloatType::get();
  if (py::isinstance<py::str>(object)) return c10::StringType::get();
  if (PyComplex_Check(object.ptr())) return c10::ComplexType::get();
  if (py::isinstance(object, torch.attr("Tensor"))) return c10::TensorType::get();
  if (py::isinstance(object, torch.attr("device"))) return c10::DeviceObjType::get();
  // TorchScript's types for these are ints (ScalarType, Layout, MemoryFormat).
  for (const char* kind : {"dtype", "layout", "memory_format"})
    if (py::isinstance(object, torch.attr(kind))) return c10::IntType::get();
  if (py::isinstance<py::list>(object) || py::isinstance<py::tuple>(object)) {
    TypePtr element = c10::IntType::get();  // an empty list: int[], as TorchScript's literal
    bool first = true;
    for (py::handle item : object) {
      TypePtr type = inferredType(item);
      if (first || *type == *element) {
        element = type;
      } else if (type->kind() == c10::TypeKind::FloatType &&
                 element->kind() == c10::TypeKind::IntType) {
        element = type;  // [1, 2.5] is a float list
      }
      first = false;
    }
    return c10::ListType::create(element);
  }
  TORCH_CHECK(false, "jitckpt cannot express the constant ", py::str(object).cast<std::string>(),
              " (", py::str(py::type::handle_of(object)).cast<std::string>(),
              ") of a captured graph in TorchScript's IR");
}

bool isTensorType(const TypePtr& type) {
  return type->isSubtypeOf(*c10::OptionalType::create(c10::TensorType::get()));
}

class GraphBuilder {
 public:
  explicit GraphBuilder(std::shared_ptr<Graph> graph) : graph_(std::move(graph)) {}

  void addEntry(std::vector<Value*> outputs) { entries_.push_back(std::move(outputs)); }

  Value* valueOf(py::handle ref) const {
    const auto entry = ref.attr("node").cast<size_t>();
    const auto output = ref.attr("output").cast<size_t>();
    TORCH_INTERNAL_ASSERT(entry < entries_.size() && output < entries_[entry].size(),
                          "a captured graph's value refers past the values made before it");
    return entries_[entry][output];
  }

  // `object` as an argument whose schema type is `expected` (null where unknown).
  NamedValue argument(py::handle object, const TypePtr& expected) {
    if (isValueRef(object)) return NamedValue(valueOf(object));
    if (holdsValueRef(object)) return NamedValue(list(object, expected));
    return NamedValue(constant(object, expected));
  }

  // One call: the exact overload first, then the operator's others (TorchScript's matching
  // without conversions over all of them, then with).
  void call(const std::string& op, const py::object& overload, const py::tuple& args,
            const py::dict& kwargs) {
    const auto symbol = c10::Symbol::fromQualString(op);
    std::vector<const c10::FunctionSchema*> schemas;
    const c10::FunctionSchema* exact = nullptr;
    const std::optional<std::string> overload_name =
        overload.is_none() ? std::nullopt
                           : std::optional<std::string>(overload.cast<std::string>());
    for (const auto& candidate : torch::jit::getAllOperatorsFor(symbol)) {
      const auto& schema = candidate->schema();
      if (overload_name && schema.overload_name() == *overload_name)
        exact = &schema;
      else
        schemas.push_back(&schema);
    }
    if (exact) schemas.insert(schemas.begin(), exact);
    TORCH_CHECK(!schemas.empty(), "jitckpt found no TorchScript operator ", op,
                " for a call of the captured graph");
    std::vector<NamedValue> positional, named;
    for (size_t i = 0; i < args.size(); ++i)
      positional.push_back(argument(args[i], expectedType(exact, i)));
    for (const auto& item : kwargs) {
      const auto name = item.first.cast<std::string>();
      std::optional<size_t> index;
      if (exact) {
        if (auto found = exact->argumentIndexWithName(name)) index = *found;
      }
      NamedValue value = argument(item.second, index ? expectedType(exact, *index) : nullptr);
      named.emplace_back(name, value.value(*graph_));
    }
    torch::jit::MatchedSchema matched;
    try {
      matched =
          torch::jit::matchSchemas(schemas, torch::jit::SourceRange(), *graph_, positional, named)
              .second;
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "jitckpt cannot express the call of ", op,
                  overload_name ? "." + *overload_name : "",
                  " in a captured graph in TorchScript's IR: ", e.what());
    }
    auto* node = graph_->insertNode(graph_->create(symbol, matched.inputs, 0));
    std::vector<Value*> outputs;
    for (const auto& type : matched.return_types)
      outputs.push_back(node->addOutput()->setType(type));
    addEntry(std::move(outputs));
  }

  Value* outputValue(py::handle object) {
    if (isValueRef(object)) return valueOf(object);
    return graph_->insertConstant(constant(object, nullptr));
  }

 private:
  static TypePtr expectedType(const c10::FunctionSchema* schema, size_t i) {
    if (!schema || i >= schema->arguments().size()) return nullptr;
    return schema->arguments()[i].type();
  }

  c10::IValue constant(py::handle object, const TypePtr& expected) {
    // A Python number where the schema wants a tensor stays a number: the matching then finds
    // the Scalar overload, as TorchScript's would, instead of a tensor made of it.
    const bool number_for_tensor = expected && isTensorType(expected) && !object.is_none() &&
                                   !py::isinstance(object, torchModule().attr("Tensor"));
    const TypePtr type = expected && !number_for_tensor ? expected : inferredType(object);
    return torch::jit::toIValue(object, type);
  }

  // A list holding values made in the graph: a ListConstruct of the schema's element type where
  // the schema says it (Tensor?[]), else of its elements' type.
  Value* list(py::handle object, const TypePtr& expected) {
    TypePtr element;
    if (expected) {
      TypePtr type = expected;
      if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
      if (auto list_type = type->cast<c10::ListType>()) element = list_type->getElementType();
    }
    std::vector<Value*> values;
    bool holds_none = false;
    for (py::handle item : object) {
      holds_none = holds_none || item.is_none();
      values.push_back(isValueRef(item) ? valueOf(item)
                                        : graph_->insertConstant(constant(item, element)));
    }
    if (!element || element->hasFreeVariables()) {
      for (Value* v : values)
        if (v->type()->kind() != c10::TypeKind::NoneType) element = v->type();
      if (holds_none) element = c10::OptionalType::create(element);
    }
    return graph_->insertNode(graph_->createList(element, values))->output();
  }

  std::shared_ptr<Graph> graph_;
  std::vector<std::vector<Value*>> entries_;  // per state entry, input and call: its outputs
};

// Constants and lists that a failed match made and no node reads.
void dropUnreadValues(Graph& graph) {
  for (auto it = graph.nodes().rbegin(); it != graph.nodes().rend();) {
    torch::jit::Node* node = *it;
    ++it;
    const bool pure =
        node->kind() == c10::prim::Constant || node->kind() == c10::prim::ListConstruct;
    if (pure && !node->hasUses()) node->destroy();
  }
}

void addCalls(GraphBuilder& builder, const py::list& calls) {
  for (py::handle entry : calls) {
    const auto item = entry.cast<py::tuple>();
    builder.call(item[0].cast<std::string>(), item[1], item[2].cast<py::tuple>(),
                 item[3].cast<py::dict>());
  }
}

void finish(const std::shared_ptr<Graph>& graph, Value* output) {
  graph->registerOutput(output);
  dropUnreadValues(*graph);
  torch::jit::ConstantPooling(graph);
}

}  // namespace

torch::jit::Module buildCapturedModule(const std::string& name, const py::list& state,
                                       const py::list& inputs, const py::list& calls,
                                       const py::list& outputs) {
  torch::jit::Module module(c10::QualifiedName("__torch__.jitckpt.captured." + name),
                            std::make_shared<torch::jit::CompilationUnit>(),
                            /*shouldMangle=*/true);
  module.register_attribute("training", c10::BoolType::get(), true);
  auto graph = std::make_shared<Graph>();
  Value* self = graph->addInput("self")->setType(module.type());
  GraphBuilder builder(graph);
  for (py::handle entry : state) {
    const auto item = entry.cast<py::tuple>();
    const auto attribute = item[0].cast<std::string>();
    const auto tensor = item[1].cast<at::Tensor>();
    module.register_parameter(attribute, tensor, /*is_buffer=*/!item[2].cast<bool>());
    builder.addEntry({graph->insertGetAttr(self, attribute)->setType(c10::TensorType::get())});
  }
  for (py::handle entry : inputs) {
    const auto item = entry.cast<py::tuple>();
    Value* input = graph->addInput(item[0].cast<std::string>());
    builder.addEntry({input->setType(typeNamed(item[1].cast<std::string>()))});
  }
  addCalls(builder, calls);
  std::vector<Value*> results;
  for (py::handle output : outputs) results.push_back(builder.outputValue(output));
  finish(graph, graph->insertNode(graph->createTuple(results))->output());
  auto* forward = module._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*module.type()->name(), "forward"), graph);
  module.type()->addMethod(forward);
  return module;
}

int64_t buildAutocastBlock(size_t num_inputs, const py::list& calls, const py::list& outputs,
                           const std::string& device, bool enabled, const py::object& dtype,
                           const py::object& cache_enabled) {
  auto graph = std::make_shared<Graph>();
  GraphBuilder builder(graph);
  for (size_t i = 0; i < num_inputs; ++i)
    builder.addEntry({graph->addInput()->setType(c10::TensorType::get())});
  addCalls(builder, calls);
  std::vector<Value*> results;
  for (py::handle output : outputs) {
    TORCH_CHECK(isValueRef(output),
                "jitckpt runs a torch.autocast block that returns tensors only, not ",
                py::str(output).cast<std::string>());
    results.push_back(builder.valueOf(output));
  }
  finish(graph, graph->insertNode(graph->createList(c10::TensorType::get(), results))->output());
  AutocastBlockState state;
  state.device = c10::Device(device).type();
  state.enabled = enabled;
  if (!dtype.is_none())
    state.dtype =
        static_cast<c10::ScalarType>(torch::jit::toIValue(dtype, c10::IntType::get()).toInt());
  if (!cache_enabled.is_none()) state.cache_enabled = cache_enabled.cast<bool>();
  return registerAutocastBlock(graph, state);
}

}  // namespace jitckpt::bindings
