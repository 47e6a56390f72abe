"""An exported program -> the TorchScript IR module the planner takes, without torch.jit.script.

The graph's ATen calls are encoded for the C++ builder (`_C.build_captured_module`,
bindings/captured_module.h): the model's state as attributes holding the user's own tensors,
forward's inputs, each call with its operator and overload, a value made earlier as a `ValueRef`.
The size arithmetic export records with Python's operators on symbolic sizes becomes TorchScript's
integer operators. Constructs the IR has no form for (nested graphs: `torch.no_grad()` or
`torch.autocast` blocks, control flow operators) are refused with the user's line.
"""
import math
import operator
from typing import Any, Dict, List, Tuple

import torch
import torch.fx

from .. import _C


class CaptureError(TypeError):
    """A model (or a construct in it) that jitckpt cannot capture and run."""


class ValueRef:
    """Output `output` of entry `node` (state, inputs, then calls, in order)."""

    __slots__ = ("node", "output")
    jitckpt_value_ref = True

    def __init__(self, node: int, output: int = 0) -> None:
        self.node, self.output = node, output


# Python's operators on symbolic sizes, as TorchScript's operators on numbers (torch's own
# symbolic functions where this PyTorch has them: 1.13 has none, nor torch.export).
_SIZE_ARITHMETIC = {
    operator.add: "aten::add", operator.sub: "aten::sub", operator.mul: "aten::mul",
    operator.floordiv: "aten::floordiv", operator.truediv: "aten::div", operator.mod: "aten::remainder",
    operator.pow: "aten::pow", operator.neg: "aten::neg", operator.eq: "aten::eq", operator.ne: "aten::ne",
    operator.lt: "aten::lt", operator.le: "aten::le", operator.gt: "aten::gt", operator.ge: "aten::ge",
    math.sqrt: "aten::sqrt", math.ceil: "aten::ceil", math.floor: "aten::floor",
}
for _name, _op in (("sym_float", "aten::Float"), ("sym_int", "aten::Int"), ("sym_max", "prim::max"),
                   ("sym_min", "prim::min")):
    if hasattr(torch, _name):
        _SIZE_ARITHMETIC[getattr(torch, _name)] = _op


def build(program: Any, module: torch.nn.Module, name: str) -> Tuple[torch.jit.ScriptModule, List[int]]:
    """The module, and the indices among the user's flat leaves of the inputs its forward takes
    (non-tensor inputs that nothing reads are dropped)."""
    graph = program.graph_module.graph
    _refuse_nested_graphs(program)
    refs: Dict[torch.fx.Node, Any] = {}  # FX node -> ValueRef, or ("list", entry) for a list result
    state, inputs, calls, passed = [], [], [], []
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    specs = program.graph_signature.input_specs
    assert len(placeholders) == len(specs), "export's signature and graph disagree"
    taken: set = set()
    user = []
    for node, spec in zip(placeholders, specs):
        if spec.kind.name == "USER_INPUT":
            user.append(node)
            continue
        tensor = _state_tensor(module, program, spec)
        refs[node] = ValueRef(len(state))
        state.append((_attribute_name(spec.target, taken), tensor, isinstance(tensor, torch.nn.Parameter)))
    for leaf, node in enumerate(user):
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) or node.users:
            refs[node] = ValueRef(len(state) + len(inputs))
            inputs.append((_attribute_name(node.name, taken), _type_name(value)))
            passed.append(leaf)
    first_call = len(state) + len(inputs)
    outputs: List[Any] = []
    for node in graph.nodes:
        if node.op == "call_function":
            call = _call(node, refs, first_call + len(calls))
            if call is not None:
                calls.append(call)
        elif node.op == "output":
            outputs = [_encoded(v, refs) for v in node.args[0]]
        elif node.op != "placeholder":
            raise CaptureError(f"jitckpt cannot yet run a captured graph with a {node.op} node ({node.target})")
    for spec in program.graph_signature.output_specs:
        if spec.kind.name != "USER_OUTPUT":
            raise CaptureError(f"jitckpt cannot yet run a captured graph with a {spec.kind.name.lower()} output")
    try:
        built = _C.build_captured_module(_class_name(name), state, inputs, calls, outputs)
    except RuntimeError as error:
        raise CaptureError(f"jitckpt captured {name} but {str(error).splitlines()[0]}") from error
    return torch.jit._recursive.wrap_cpp_module(built), passed


def _call(node: torch.fx.Node, refs: Dict[torch.fx.Node, Any], entry: int) -> Any:
    """The call `node` encodes (None where it only picks an output of an earlier one)."""
    target = node.target
    if target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        source = refs[node.args[0]]
        if isinstance(source, ValueRef):  # an output of a call with several
            refs[node] = ValueRef(source.node, node.args[1])
            return None
        refs[node] = ValueRef(entry)
        return ("aten::__getitem__", "t", (ValueRef(source[1]), node.args[1]), {})
    if isinstance(target, torch._ops.OpOverload):
        schema = target._schema
        returns = schema.returns
        list_result = len(returns) == 1 and isinstance(returns[0].type, torch._C.ListType)
        refs[node] = ("list", entry) if list_result else ValueRef(entry)
        op = (schema.name, schema.overload_name)
    elif target in _SIZE_ARITHMETIC:
        refs[node] = ValueRef(entry)
        op = (_SIZE_ARITHMETIC[target], None)
    else:
        raise CaptureError(f"jitckpt cannot run {getattr(target, '__name__', target)} as captured by "
                           f"torch.export ({_user_line(node) or node.name})")
    args = tuple(_encoded(a, refs) for a in node.args)
    kwargs = {k: _encoded(v, refs) for k, v in node.kwargs.items()}
    return op + (args, kwargs)


def _encoded(value: Any, refs: Dict[torch.fx.Node, Any]) -> Any:
    if isinstance(value, torch.fx.Node):
        ref = refs[value]
        return ref if isinstance(ref, ValueRef) else ValueRef(ref[1])
    if isinstance(value, (list, tuple)):
        return [_encoded(v, refs) for v in value]
    return value


def _type_name(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "Tensor"
    for kind in (bool, int, float, str):  # bool before int: True is an int too
        if isinstance(value, kind):
            return kind.__name__
    return type(value).__name__


def _class_name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name) or "Model"


def _attribute_name(target: str, taken: set) -> str:
    name = "".join(c if c.isalnum() else "_" for c in target) or "value"
    if name[0].isdigit():
        name = "_" + name
    unique, n = name, 1
    while unique in taken:
        unique, n = f"{name}_{n}", n + 1
    taken.add(unique)
    return unique


def _state_tensor(module: torch.nn.Module, program: Any, spec: Any) -> torch.Tensor:
    kind = spec.kind.name
    if kind == "PARAMETER":
        return module.get_parameter(spec.target)
    if kind == "BUFFER":
        return module.get_buffer(spec.target)
    if kind == "CONSTANT_TENSOR":
        return program.constants[spec.target]
    raise CaptureError(f"jitckpt cannot yet run a captured graph with a {kind.lower()} input ({spec.target})")


def _refuse_nested_graphs(program: Any) -> None:
    """Export records `with torch.no_grad()` / `torch.autocast` blocks and control flow operators
    as calls of nested graphs, which TorchScript's IR has no form for."""
    for node in program.graph_module.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
            what = {"wrap_with_set_grad_enabled": "a torch.no_grad() or torch.enable_grad() block",
                    "wrap_with_autocast": "a torch.autocast block"}.get(node.target.name(), node.target.name())
            where = _user_line(node, program.graph_module)
            raise CaptureError(f"jitckpt cannot run {what} inside forward as captured by torch.export"
                               + (f" ({where})" if where else "") + "; move it out of forward")


def _user_line(node: torch.fx.Node, graph_module: Any = None) -> str:
    """The model's line that made `node`, or the first one its nested graphs record."""
    traces = [node.meta.get("stack_trace")]
    for argument in node.args:
        if graph_module is not None and isinstance(argument, torch.fx.Node) and argument.op == "get_attr":
            nested = getattr(graph_module, argument.target, None)
            if isinstance(nested, torch.fx.GraphModule):
                traces += [n.meta.get("stack_trace") for n in nested.graph.nodes]
    for trace in traces:
        lines = [line.strip() for line in (trace or "").strip().splitlines()]
        if len(lines) >= 2:
            return f"{lines[-2]}: {lines[-1]}"
    return ""
