"""An exported program -> the TorchScript IR module the planner takes, without torch.jit.script.

The graph's ATen calls are encoded for the C++ builder (`_C.build_captured_module`,
bindings/captured_module.h): the model's state as attributes holding the user's own tensors,
forward's inputs, each call with its operator and overload, a value made earlier as a `ValueRef`.
The size arithmetic export records with Python's operators on symbolic sizes becomes TorchScript's
integer operators. Blocks export records as nested graphs are inlined where that runs them as the
model does: `torch.no_grad()` and `torch.enable_grad()`, and a `torch.autocast` block that leaves
autocast as the capture's call has it. One that switches autocast for the call becomes one
jitckpt::autocast_block call (runtime/autocast_block.h) that runs its own graph under the state it
sets. Control flow operators are refused with the user's line.
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


def build(program: Any, module: torch.nn.Module, name: str) -> Tuple[torch.jit.ScriptModule, List[int], bool]:
    """The module; the indices among the user's flat leaves of the inputs its forward takes
    (non-tensor inputs that nothing reads are dropped); whether it inlined an autocast block that
    is a no-op under the capture's autocast state only (Capture.autocast)."""
    graph = program.graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    specs = program.graph_signature.input_specs
    assert len(placeholders) == len(specs), "export's signature and graph disagree"
    taken: set = set()
    state, inputs, passed, user = [], [], [], []
    refs: Dict[torch.fx.Node, Any] = {}
    without_grad = set()  # state that never requires grad (buffers)
    for node, spec in zip(placeholders, specs):
        if spec.kind.name == "USER_INPUT":
            user.append(node)
            continue
        tensor = _state_tensor(module, program, spec)
        refs[node] = ValueRef(len(state))
        if not tensor.requires_grad:
            without_grad.add(node)
        state.append((_attribute_name(spec.target, taken), tensor, isinstance(tensor, torch.nn.Parameter)))
    for leaf, node in enumerate(user):
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) or node.users:
            refs[node] = ValueRef(len(state) + len(inputs))
            inputs.append((_attribute_name(node.name, taken), _type_name(value)))
            passed.append(leaf)
    for spec in program.graph_signature.output_specs:
        if spec.kind.name != "USER_OUTPUT":
            raise CaptureError(f"jitckpt cannot yet run a captured graph with a {spec.kind.name.lower()} output")
    encoder = _Encoder(refs, len(state) + len(inputs), without_grad)
    outputs = encoder.graph(program.graph_module)
    try:
        built = _C.build_captured_module(_class_name(name), state, inputs, encoder.calls, outputs)
    except RuntimeError as error:
        raise CaptureError(f"jitckpt captured {name} but {str(error).splitlines()[0]}") from error
    return torch.jit._recursive.wrap_cpp_module(built), passed, encoder.inlined_autocast_block


class _ListResult:
    """A call's result that is a list (split, unbind): read by aten::__getitem__."""

    def __init__(self, entry: int) -> None:
        self.entry = entry


class _Encoder:
    """The calls of a graph and of the blocks it holds, in order; `refs` maps each FX node read so
    far to a ValueRef, a _ListResult, a list (a block's outputs) or a constant."""

    def __init__(self, refs: Dict[torch.fx.Node, Any], first_call: int, without_grad: set,
                 inline_autocast: bool = True) -> None:
        self.refs, self.first_call, self.without_grad = refs, first_call, without_grad
        self.inline_autocast = inline_autocast  # False inside a block that switches autocast
        self.calls: List[Any] = []
        self.inlined_autocast_block = False

    def graph(self, graph_module: torch.fx.GraphModule) -> List[Any]:
        """Encodes the graph's calls (its placeholders already in refs); returns its outputs."""
        for node in graph_module.graph.nodes:
            if node.op == "call_function":
                self._node(node, graph_module)
            elif node.op == "output":
                return [self.encoded(v) for v in node.args[0]]
            elif node.op not in ("placeholder", "get_attr"):  # get_attr: a block's graph
                raise CaptureError(f"jitckpt cannot yet run a captured graph with a {node.op} node ({node.target})")
        raise CaptureError("jitckpt found no output in a captured graph")

    def encoded(self, value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            ref = self.refs[value]
            return ValueRef(ref.entry) if isinstance(ref, _ListResult) else ref
        if isinstance(value, (list, tuple)):
            return [self.encoded(v) for v in value]
        return value

    def _add(self, op: str, overload: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> int:
        self.calls.append((op, overload, args, kwargs))
        return self.first_call + len(self.calls) - 1

    def _node(self, node: torch.fx.Node, graph_module: torch.fx.GraphModule) -> None:
        target = node.target
        if target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            source, index = self.refs[node.args[0]], node.args[1]
            if isinstance(source, ValueRef):  # an output of a call with several
                self.refs[node] = ValueRef(source.node, index)
            elif isinstance(source, list):  # an output of a block
                self.refs[node] = source[index]
            else:
                self.refs[node] = ValueRef(self._add("aten::__getitem__", "t", (ValueRef(source.entry), index), {}))
            return
        if isinstance(target, torch._ops.HigherOrderOperator):
            self._block(node, graph_module)
            return
        if isinstance(target, torch._ops.OpOverload):
            schema = target._schema
            op = ("jitckpt::indexing_slice", "") if _indexing_may_skip(node) else (schema.name, schema.overload_name)
            list_result = len(schema.returns) == 1 and isinstance(schema.returns[0].type, torch._C.ListType)
        elif target in _SIZE_ARITHMETIC:
            op, list_result = (_SIZE_ARITHMETIC[target], None), False
        else:
            raise CaptureError(f"jitckpt cannot run {getattr(target, '__name__', target)} as captured by "
                               f"torch.export ({_user_line(node) or node.name})")
        args = tuple(self.encoded(a) for a in node.args)
        if isinstance(target, torch._ops.OpOverload):
            args = tuple(self._number_as_tensor(a, argument) for a, argument in zip(args, target._schema.arguments))
        entry = self._add(*op, args, {k: self.encoded(v) for k, v in node.kwargs.items()})
        self.refs[node] = _ListResult(entry) if list_result else ValueRef(entry)

    def _number_as_tensor(self, value: Any, argument: Any) -> Any:
        """A Python number where the schema takes a tensor (export records torch.add(0.5, x) as
        add.Tensor(0.5, x), which TorchScript has no overload for): the 0-dim tensor NumToTensor
        makes, a wrapped number, which promotes with other tensors as the number does."""
        if isinstance(argument.type, torch.TensorType) and isinstance(value, (bool, int, float)):
            return ValueRef(self._add("prim::NumToTensor", None, (value,), {}))
        return value

    def _block(self, node: torch.fx.Node, graph_module: torch.fx.GraphModule) -> None:
        """A `torch.no_grad()` / `torch.enable_grad()` block, or a `torch.autocast` block that leaves
        autocast as the capture's call had it, inlined (one that switches it: _autocast_op). A
        no_grad block reads the tensors that may require grad through detached aliases: its ops
        then record nothing and choose their kernels as without grad, and what it makes requires
        no grad, as in the model."""
        kind = node.target.name()
        if kind == "wrap_with_set_grad_enabled":
            enabled, nested, *args = node.args
            detach = not enabled
        elif kind == "wrap_with_autocast":
            device, dtype, enabled, _, nested, *args = node.args
            if not (self.inline_autocast and _autocast_unchanged(device, dtype, enabled)):
                self._autocast_op(node, graph_module)
                return
            self.inlined_autocast_block, detach = True, False
        else:
            raise CaptureError(f"jitckpt cannot run {kind} inside forward as captured by torch.export"
                               f" ({_user_line(node, graph_module) or node.name}); move it out of forward")
        block = getattr(graph_module, nested.target)
        placeholders = [n for n in block.graph.nodes if n.op == "placeholder"]
        for placeholder, argument in zip(placeholders, args):
            ref = self.encoded(argument)
            if detach and self._may_require_grad(argument):
                ref = ValueRef(self._add("aten::detach", "", (ref,), {}))
            self.refs[placeholder] = ref
        outputs = self.graph(block)
        # A block that returns an input unchanged returns the tensor itself, not the alias.
        for i, value in enumerate(block.graph.output_node().args[0]):
            if isinstance(value, torch.fx.Node) and value.op == "placeholder":
                outputs[i] = self.encoded(args[placeholders.index(value)])
        self.refs[node] = outputs

    def _autocast_op(self, node: torch.fx.Node, graph_module: torch.fx.GraphModule) -> None:
        """An autocast block that switches autocast for this call: its own graph, run by a
        jitckpt::autocast_block call under the state it sets, whatever the call's (one op to the
        partition)."""
        device, dtype, enabled, cache_enabled, nested, *args = node.args
        block = getattr(graph_module, nested.target)
        where = _user_line(node, graph_module) or node.name
        for inner in block.graph.nodes:
            target = inner.target
            if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
                raise CaptureError(f"jitckpt cannot run {target} (in place) inside a torch.autocast block that "
                                   f"switches autocast ({where}); move it out of the block")
        if not all(isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor) for a in args):
            raise CaptureError(f"jitckpt runs a torch.autocast block that switches autocast on tensors only ({where})")
        placeholders = [n for n in block.graph.nodes if n.op == "placeholder"]
        inner = _Encoder({p: ValueRef(i) for i, p in enumerate(placeholders)}, len(placeholders),
                         {p for p, a in zip(placeholders, args) if a in self.without_grad}, inline_autocast=False)
        outputs = inner.graph(block)
        try:
            number = _C.build_autocast_block(len(placeholders), inner.calls, outputs, device, enabled, dtype,
                                             cache_enabled)
        except RuntimeError as error:
            raise CaptureError(f"{str(error).splitlines()[0]} ({where})") from error
        entry = self._add("jitckpt::autocast_block", "", (number, [self.encoded(a) for a in args]), {})
        self.refs[node] = [ValueRef(self._add("aten::__getitem__", "t", (ValueRef(entry), i), {}))
                           for i in range(len(outputs))]

    def _may_require_grad(self, value: Any) -> bool:
        """A floating-point tensor other than a buffer (export's example values say no activation
        requires grad, so they cannot tell): detached where it does not require grad, the alias
        computes the same (a buffer, which a block may write, is read as it is)."""
        meta = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
        return (isinstance(meta, torch.Tensor) and (meta.is_floating_point() or meta.is_complex())
                and value not in self.without_grad)


def _indexing_may_skip(node: torch.fx.Node) -> bool:
    """Whether an aten.slice may be one that Python's indexing on a tuple skips where it takes a whole
    dimension (x[:, :n] with n the size: autograd passes the gradient on as it comes, where
    aten::slice's backward makes a new contiguous one that kernels after it may round differently
    on). Export records such a slice where it cannot tell for a dynamic size; it becomes
    jitckpt::indexing_slice, which decides as indexing does when it runs. A slice of the first
    dimension to a given end may be x[:n], which indexing always slices, and stays one."""
    if node.target is not torch.ops.aten.slice.Tensor:
        return False
    given = dict(zip([a.name for a in node.target._schema.arguments], node.args), **node.kwargs)
    source, dim, start, end = given["self"], given.get("dim", 0), given.get("start"), given.get("end")
    meta = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if given.get("step", 1) != 1 or start not in (None, 0) or not isinstance(meta, torch.Tensor):
        return False
    if (isinstance(end, int) and end < 0) or (isinstance(meta.shape[dim], int) and not isinstance(end, torch.fx.Node)):
        return False  # never the whole dimension, or export decided as indexing does
    return dim % meta.dim() > 0 or end is None or (isinstance(end, int) and end >= 2**62)


def autocast_state(device: str) -> Tuple[bool, Any]:
    """Whether autocast is on for `device` here, and its dtype (PyTorch 2.4 on, as export's
    capture: a Capture reads it only where one was made)."""
    return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)


def ambient_autocast() -> Tuple[Tuple[bool, Any], ...]:
    return tuple(autocast_state(device) for device in ("cpu", "cuda"))


def _autocast_unchanged(device: str, dtype: Any, enabled: bool) -> bool:
    on, ambient = autocast_state(device)
    return enabled == on and (not enabled or dtype is None or dtype == ambient)


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
