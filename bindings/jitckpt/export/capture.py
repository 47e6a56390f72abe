"""Capture: an nn.Module and one call's arguments -> a TorchScript module over the call's tensors.

torch.export (non-strict, training IR, each tensor dimension dynamic where the model lets it be)
records forward's ATen graph. Its parameters and buffers become attributes holding the user's own
tensors, and the graph is scripted, so that the planner (partition, profile, solve, rewrite) and
the C++ runtime take it as they take a scripted model. A `Capture` says which calls it serves:
the same argument structure and non-tensor values, the same dtypes, devices and training flags,
and sizes within the ranges export proved.
"""
import contextlib
import copy
import dataclasses
import inspect
import logging
import re
import sys
import warnings
from typing import Any, Dict, Iterator, List, Tuple

import torch
import torch.utils._pytree as pytree

from ..torchscript import quiet_torchscript


class CaptureError(TypeError):
    """A model (or a construct in it) that jitckpt cannot capture and run."""


def available() -> bool:
    """Whether this PyTorch captures training graphs with torch.export (2.6 on)."""
    export = getattr(torch, "export", None)
    return export is not None and hasattr(export, "Dim") and hasattr(export.Dim, "AUTO")


@dataclasses.dataclass
class Capture:
    scripted: torch.jit.ScriptModule  # forward(*tensors and used non-tensor leaves) -> tuple
    in_spec: Any  # the pytree spec of (args, kwargs) it was captured with
    leaves: List[Any]  # per flat leaf: None for a tensor, else its value (must match)
    passed: List[int]  # the flat leaves forward takes, in order
    sizes: List[Tuple[Any, ...]]  # per tensor leaf: each dimension an int or a sympy expression
    ranges: Dict[Any, Tuple[int, float]]  # per symbol: inclusive bounds export proved
    tensor_types: List[Tuple[torch.dtype, torch.device]]  # per tensor leaf
    training: Tuple[bool, ...]  # every submodule's flag
    out_spec: Any  # the pytree spec of forward's result

    def serves(self, flat: List[Any], spec: Any, training: Tuple[bool, ...]) -> bool:
        if spec != self.in_spec or training != self.training or len(flat) != len(self.leaves):
            return False
        tensors = [x for x in flat if isinstance(x, torch.Tensor)]
        if len(tensors) != len(self.sizes):
            return False
        for value, captured in zip(flat, self.leaves):
            if not isinstance(value, torch.Tensor) and (type(value) is not type(captured) or value != captured):
                return False
        if [(t.dtype, t.device) for t in tensors] != self.tensor_types:
            return False
        return self._sizes_fit(tensors)

    def _sizes_fit(self, tensors: List[torch.Tensor]) -> bool:
        bound: Dict[Any, int] = {}
        derived = []
        for tensor, sizes in zip(tensors, self.sizes):
            if tensor.dim() != len(sizes):
                return False
            for size, captured in zip(tensor.shape, sizes):
                if isinstance(captured, int):
                    if size != captured:
                        return False
                elif captured.is_Symbol:
                    if bound.setdefault(captured, size) != size:
                        return False
                else:
                    derived.append((size, captured))
        for symbol, size in bound.items():
            low, high = self.ranges.get(symbol, (0, float("inf")))
            if not low <= size <= high:
                return False
        return all(captured.free_symbols <= bound.keys() and int(captured.subs(bound)) == size
                   for size, captured in derived)


def flatten(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[List[Any], Any]:
    return pytree.tree_flatten((tuple(args), dict(kwargs)))


def training_flags(module: torch.nn.Module) -> Tuple[bool, ...]:
    return tuple(m.training for m in module.modules())


def _dynamic_shapes(module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Every dimension of every tensor argument dynamic where the model allows (Dim.AUTO)."""
    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    auto = torch.export.Dim.AUTO

    def shape_of(value: Any) -> Any:
        return {i: auto for i in range(value.dim())} if isinstance(value, torch.Tensor) else None

    shapes = {}
    for name, value in bound.arguments.items():
        kind = inspect.signature(module.forward).parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            shapes[name] = tuple(pytree.tree_map(shape_of, v) for v in value)
        elif kind == inspect.Parameter.VAR_KEYWORD:
            shapes[name] = {k: pytree.tree_map(shape_of, v) for k, v in value.items()}
        else:
            shapes[name] = pytree.tree_map(shape_of, value)
    return shapes


@contextlib.contextmanager
def _attributes_kept(values: List[Any]) -> Iterator[None]:
    """Export marks the tensors it makes dynamic (_dynamo_dynamic_indices, ...): restored after,
    so that neither a second export nor the user's own torch.compile sees the marks."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    saved = [dict(t.__dict__) for t in tensors]
    try:
        yield
    finally:
        for tensor, attributes in zip(tensors, saved):
            tensor.__dict__.clear()
            tensor.__dict__.update(attributes)


@contextlib.contextmanager
def _shape_logs_quiet() -> Iterator[None]:
    """A capture that fails logs its symbolic reasoning as errors: jitckpt reports the failure itself."""
    loggers = [logging.getLogger(f"torch.fx.experimental.{name}") for name in ("symbolic_shapes", "recording")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _export(module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], dynamic: bool) -> Any:
    """The training graph, with every size dynamic where export manages it, or with this call's."""
    leaves = flatten(args, kwargs)[0]
    shapes = _dynamic_shapes(module, args, kwargs) if dynamic else None
    registered: set = set()
    while True:
        with warnings.catch_warnings(), _attributes_kept(leaves), _shape_logs_quiet():
            warnings.filterwarnings("ignore", message=r"`torch\.utils\._pytree\._register_pytree_node` is deprecated")
            try:
                return torch.export.export(module, tuple(args), dict(kwargs), strict=False, dynamic_shapes=shapes)
            except Exception as error:  # export's message names the construct and the line
                output_type = _unregistered_dataclass(error)
                if output_type is not None and output_type not in registered:
                    torch.export.register_dataclass(output_type)  # as transformers registers its outputs
                    registered.add(output_type)
                    continue
                raise CaptureError(
                    f"jitckpt could not capture {type(module).__name__} with torch.export ({_export_error(error)}); "
                    "https://pytorch.org/docs/stable/export.html says what export supports"
                ) from error


def _unregistered_dataclass(error: Exception) -> Any:
    """The dataclass that export met in forward's output without a pytree registration, where its
    message names one that can be imported (not a class local to a function)."""
    match = re.search(r"Found <class '([\w.]+)'> in output, which is not a known type", str(error))
    if match is None:
        return None
    path = match.group(1).split(".")
    for split in range(len(path) - 1, 0, -1):
        owner = sys.modules.get(".".join(path[:split]))
        for name in path[split:]:
            owner = getattr(owner, name, None)
        if owner is not None:
            return owner if dataclasses.is_dataclass(owner) and isinstance(owner, type) else None
    return None


def _export_error(error: Exception) -> str:
    """Export's first line, and the user's line it names ("The following call raised this error")."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    for i, line in enumerate(lines):
        if line.strip().startswith("File ") and i + 1 < len(lines) and "torch/" not in line:
            text += f", at {line.strip()}: {lines[i + 1].strip()}"
            break
    return text


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
            where = _user_line(program.graph_module, node)
            raise CaptureError(f"jitckpt cannot run {what} inside forward as captured by torch.export"
                               + (f" ({where})" if where else "") + "; move it out of forward")


def _user_line(graph_module: torch.fx.GraphModule, node: Any) -> str:
    """The model's line that made `node`, or the first one its nested graphs record."""
    traces = [node.meta.get("stack_trace")]
    for argument in node.args:
        if isinstance(argument, torch.fx.Node) and argument.op == "get_attr":
            nested = getattr(graph_module, argument.target, None)
            if isinstance(nested, torch.fx.GraphModule):
                traces += [n.meta.get("stack_trace") for n in nested.graph.nodes]
    for trace in traces:
        lines = [line.strip() for line in (trace or "").strip().splitlines()]
        if len(lines) >= 2:
            return f"{lines[-2]}: {lines[-1]}"
    return ""


def _scriptable(program: Any, module: torch.nn.Module) -> Tuple[torch.fx.GraphModule, List[int]]:
    """The exported graph with its state as attributes of a root holding the user's tensors, its
    non-tensor inputs that nothing reads dropped, and plain ATen op packets TorchScript resolves.
    Returns it and the indices, among the user's flat leaves, of the inputs it keeps."""
    _refuse_nested_graphs(program)
    graph = copy.deepcopy(program.graph_module.graph)
    root = torch.nn.Module()
    taken: set = set()
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    specs = program.graph_signature.input_specs
    assert len(placeholders) == len(specs), "export's signature and graph disagree"
    passed, leaf = [], 0
    first_op = next(n for n in graph.nodes if n.op != "placeholder")
    for node, spec in zip(placeholders, specs):
        if spec.kind.name == "USER_INPUT":
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor) or node.users:
                passed.append(leaf)
                if not isinstance(value, torch.Tensor):
                    node.type = type(value)
            else:
                graph.erase_node(node)
            leaf += 1
            continue
        tensor = _state_tensor(module, program, spec)
        name = _attribute_name(spec.target, taken)
        if isinstance(tensor, torch.nn.Parameter):
            root.register_parameter(name, tensor)
        else:
            root.register_buffer(name, tensor)
        with graph.inserting_before(first_op):
            attribute = graph.get_attr(name)
        node.replace_all_uses_with(attribute)
        graph.erase_node(node)
    for node in graph.nodes:
        if isinstance(node.target, torch._ops.OpOverload):
            node.target = node.target.overloadpacket
        if node.kwargs:
            node.kwargs = {k: str(v) if isinstance(v, torch.device) else v for k, v in node.kwargs.items()}
    for spec in program.graph_signature.output_specs:
        if spec.kind.name != "USER_OUTPUT":
            raise CaptureError(f"jitckpt cannot yet run a captured graph with a {spec.kind.name.lower()} output")
    return torch.fx.GraphModule(root, graph), passed


def capture(module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Capture:
    """Sizes dynamic first; where export cannot bound them (data-dependent size checks, size
    arithmetic) or the graph needs what TorchScript lacks (sizes turned into floats), this call's
    sizes. A failure of the second try is the one reported."""
    for dynamic in (True, False):
        try:
            program = _export(module, args, kwargs, dynamic)
            graph_module, passed = _scriptable(program, module)
            scripted = _script(graph_module, type(module).__name__)
            break
        except CaptureError:
            if not dynamic:
                raise
    flat, spec = flatten(args, kwargs)
    tensors = [x for x in flat if isinstance(x, torch.Tensor)]
    values = [n.meta.get("val") for n in program.graph_module.graph.nodes if n.op == "placeholder"]
    users = [v for v, s in zip(values, program.graph_signature.input_specs) if s.kind.name == "USER_INPUT"]
    sizes = [tuple(d if isinstance(d, int) else d.node.expr for d in v.shape)
             for v in users if isinstance(v, torch.Tensor)]
    ranges = {symbol: (int(r.lower), _bound(r.upper)) for symbol, r in program.range_constraints.items()}
    return Capture(
        scripted=scripted, in_spec=spec, leaves=[None if isinstance(x, torch.Tensor) else x for x in flat],
        passed=passed, sizes=sizes, ranges=ranges, tensor_types=[(t.dtype, t.device) for t in tensors],
        training=training_flags(module), out_spec=program.call_spec.out_spec,
    )


def _script(graph_module: torch.fx.GraphModule, name: str) -> torch.jit.ScriptModule:
    try:
        with quiet_torchscript(), warnings.catch_warnings():
            # (GraphModule's own __init__ annotations: TorchScript's note about them is not the user's)
            warnings.filterwarnings("ignore", message="The TorchScript type system doesn't support instance-level")
            return torch.jit.script(graph_module)
    except Exception as error:
        text = str(error).strip()
        raise CaptureError(
            f"jitckpt captured {name} but could not compile its graph "
            f"({text.splitlines()[0] if text else type(error).__name__}); please report it"
        ) from error


def outputs(capture_: Capture, result: Any) -> Any:
    flat = list(result) if isinstance(result, tuple) else [result]
    return pytree.tree_unflatten(flat, capture_.out_spec)


def arguments(capture_: Capture, flat: List[Any]) -> List[Any]:
    return [flat[i] for i in capture_.passed]


def _bound(value: Any) -> float:
    return int(value) if getattr(value, "is_finite", True) and getattr(value, "is_Integer", True) else float("inf")
