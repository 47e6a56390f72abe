"""Capture: an nn.Module and one call's arguments -> a TorchScript IR module over the call's tensors.

torch.export (non-strict, training IR, each tensor dimension dynamic where the model lets it be)
records forward's ATen graph; aten_graph.py builds it as a module whose parameters and buffers are
the user's own tensors (no TorchScript compiler), so that the planner (partition, profile, solve,
rewrite) and the C++ runtime take it as they take a scripted model. A `Capture` says which calls it serves:
the same argument structure and non-tensor values, the same dtypes, devices and training flags,
and sizes within the ranges export proved.
"""
import contextlib
import dataclasses
import inspect
import io
import logging
import math
import os
import re
import sys
import traceback
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
import torch.utils._pytree as pytree

from ..sharding import refuse_flat_parameter_views, refuse_sharded_parts
from . import python_attributes
from .aten_graph import CaptureError, ambient_autocast, build
from .autograd_functions import functions_as_operators
from .host_random import host_draws, refusal
from .hugging_face import eager_mask_decisions, scan_advice
from .layer_drop import layer_drop_decided, layer_drops_above_zero
from .module_hooks import refuse_backward_hooks, warn_forward_hooks
from .recurrent_layers import recurrent_lengths_dynamic
from .size_probe import sizes_hold
from .vmap import lower_vmap


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
    ranges: Dict[Any, Tuple[float, float]]  # per symbol: inclusive bounds export proved
    tensor_types: List[Tuple[torch.dtype, torch.device]]  # per tensor leaf
    training: Tuple[bool, ...]  # every submodule's flag
    out_spec: Any  # the pytree spec of forward's result
    # The Python values of the modules when it was captured (what forward read of them is constant
    # in the graph).
    attributes: List[python_attributes.Attribute] = dataclasses.field(default_factory=list)
    # The autocast state it was captured under, where it inlined an autocast block as a no-op
    # there (aten_graph.py); None where any state serves.
    autocast: Optional[Tuple[Any, ...]] = None

    def serves(self, flat: List[Any], spec: Any, training: Tuple[bool, ...]) -> bool:
        tensors = tensor_leaves(flat)
        return self._serves_but_sizes(flat, tensors, spec, training) and self._sizes_fit(tensors)

    def static_size_missed(self, flat: List[Any], spec: Any, training: Tuple[bool, ...]) -> Optional[Tuple[int, int]]:
        """(tensor argument, dimension): the first size that export kept static in this capture and
        that the call has another of, where all else would serve; None otherwise."""
        tensors = tensor_leaves(flat)
        if not self._serves_but_sizes(flat, tensors, spec, training):
            return None
        for index, (tensor, sizes) in enumerate(zip(tensors, self.sizes)):
            if tensor.dim() != len(sizes):
                return None
            for dim, (size, captured) in enumerate(zip(tensor.shape, sizes)):
                if (isinstance(captured, int) or not captured.free_symbols) and size != int(captured):
                    return index, dim
        return None

    def _serves_but_sizes(self, flat: List[Any], tensors: List[torch.Tensor], spec: Any,
                          training: Tuple[bool, ...]) -> bool:
        if spec != self.in_spec or training != self.training or len(flat) != len(self.leaves):
            return False
        if not python_attributes.hold(self.attributes):
            return False
        if self.autocast is not None and self.autocast != ambient_autocast():
            return False
        if len(tensors) != len(self.sizes):
            return False
        for value, captured in zip(flat, self.leaves):
            if not isinstance(value, torch.Tensor) and (type(value) is not type(captured) or value != captured):
                return False
        return [(t.dtype, t.device) for t in tensors] == self.tensor_types

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


def tensor_leaves(flat: List[Any]) -> List[torch.Tensor]:
    """The tensors among a call's flat leaves, in order (a Capture's sizes and types are theirs)."""
    return [x for x in flat if isinstance(x, torch.Tensor)]


def flatten(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[List[Any], Any]:
    return pytree.tree_flatten((tuple(args), dict(kwargs)))


def model_state(module: torch.nn.Module) -> Tuple[Tuple[bool, ...], List[Optional[torch.Tensor]]]:
    """Every submodule's training flag, and the parameters and buffers the captured graph holds,
    in one walk (each training call takes both; a walk by named_modules took three times as long)."""
    flags: List[bool] = []
    tensors: List[Optional[torch.Tensor]] = []
    stack = [module]
    while stack:
        sub = stack.pop()
        flags.append(sub.training)
        tensors.extend(sub._parameters.values())
        tensors.extend(sub._buffers.values())
        stack.extend(m for m in sub._modules.values() if m is not None)
    return tuple(flags), tensors


def training_flags(module: torch.nn.Module) -> Tuple[bool, ...]:
    return model_state(module)[0]


def _dynamic_dims(value: torch.Tensor) -> List[int]:
    """The dimensions of a tensor argument that the capture keeps dynamic where the model allows:
    every one, but an image's or a video's (a floating tensor of four dimensions or more) only its
    batch. Export's reasoning over window and stride arithmetic on a dynamic height and width takes
    minutes (torchvision's MaxVit, Swin); a new image size is captured again. A size of 0 or 1
    export specializes: static from the start, without its warning (a batch of one)."""
    dims = range(1) if value.is_floating_point() and value.dim() >= 4 else range(value.dim())
    return [i for i in dims if value.shape[i] > 1]


def _dynamic_shapes(module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The dimensions _dynamic_dims names dynamic where the model allows (Dim.AUTO), the others static."""
    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    auto = torch.export.Dim.AUTO

    def shape_of(value: Any) -> Any:
        return {i: auto for i in _dynamic_dims(value)} if isinstance(value, torch.Tensor) else None

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


@contextlib.contextmanager
def _partial_graph_unprinted() -> Iterator[None]:
    """Export (2.14) prints the graph it traced so far to stderr where it fails on data, hundreds
    of lines, twice at each try; jitckpt reports the failure itself. What else forward writes
    there passes through."""
    written = io.StringIO()
    try:
        with contextlib.redirect_stderr(written):
            yield
    except Exception as error:
        text = written.getvalue()
        cause: Optional[BaseException] = error
        while cause is not None:  # export's own error, under the CaptureError that reports it
            graph = getattr(cause, "partial_fx_graph", None)
            if graph is not None:
                text = text.replace(f"{graph}\n", "")
            cause = cause.__cause__
        sys.stderr.write(text)
        raise
    sys.stderr.write(written.getvalue())


def _export(module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], dynamic: bool) -> Any:
    """The training graph, with the sizes _dynamic_shapes names dynamic where export manages it, or
    with this call's."""
    leaves = flatten(args, kwargs)[0]
    shapes = _dynamic_shapes(module, args, kwargs) if dynamic else None
    registered: set = set()
    while True:
        with warnings.catch_warnings(), _attributes_kept(leaves), _shape_logs_quiet(), _partial_graph_unprinted():
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


# Where a traceback's frames are torch's or jitckpt's own, not the model's.
_NOT_THE_USERS = (os.path.dirname(torch.__file__) + os.sep,
                  os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)


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
    """Export's first line and the user's line: the one its message names ("The following call
    raised this error"), else the last of the traceback outside torch. A condition on the values of
    tensors gets what to do."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    for i, line in enumerate(lines):
        if line.strip().startswith("File ") and i + 1 < len(lines) and "torch/" not in line:
            text += f", at {line.strip()}: {lines[i + 1].strip()}"
            break
    else:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(_NOT_THE_USERS)]
        if frames:
            text += f', at File "{frames[-1].filename}", line {frames[-1].lineno}: {frames[-1].line}'
    if "data-dependent" in text:
        text += ("; forward branches there on the values of its tensors, which one captured graph cannot follow: "
                 "move that code out of forward (a loss that reads the labels: call the model without them and "
                 "take the loss of its outputs)")
    return text


def capture(module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Capture:
    """Sizes dynamic first; where export cannot bound them (data-dependent size checks, size
    arithmetic), the graph does not run at other sizes within its ranges (size_probe.py) or holds
    size arithmetic TorchScript's IR cannot express, this call's sizes. A failure of the second try
    is the one reported."""
    refuse_sharded_parts(module)
    refuse_flat_parameter_views(module)  # before the plain parameters they are (use_orig_params)
    refuse_backward_hooks(module)
    _refuse_plain_parameters(module)
    reads: python_attributes.Reads = set()
    for dynamic in (True, False):
        try:
            with layer_drop_decided(module), functions_as_operators(), eager_mask_decisions(), host_draws() as drawn, \
                    recurrent_lengths_dynamic(), python_attributes.reads_recorded(module, reads):
                program = _export(module, args, kwargs, dynamic)
            if drawn:
                break
            if dynamic and not sizes_hold(program, *flatten(args, kwargs), *_sizes_and_ranges(program)):
                continue  # a size export kept as it was here, beside ranges that say otherwise
            try:
                lower_vmap(program)
            except CaptureError as error:
                raise CaptureError(f"{error}{scan_advice(module)}") from error
            scripted, passed, inlined_autocast_block = build(program, module, type(module).__name__)
            break
        except CaptureError as error:
            if drawn:  # the reason that holds whatever else export met
                break
            if not dynamic:
                above_zero = layer_drops_above_zero(module)
                if above_zero and "data-dependent" in str(error):
                    raise CaptureError(f"{error}; the model's LayerDrop ({', '.join(above_zero)}) skips layers at "
                                       "random, step by step, which no one plan follows: set it to 0") from error
                raise
    if drawn:
        raise CaptureError(refusal(module, drawn))
    warn_forward_hooks(module)
    attributes = python_attributes.record(module, reads)  # export puts back what forward set
    flat, spec = flatten(args, kwargs)
    tensors = tensor_leaves(flat)
    sizes, ranges = _sizes_and_ranges(program)
    return Capture(
        scripted=scripted, in_spec=spec, leaves=[None if isinstance(x, torch.Tensor) else x for x in flat],
        passed=passed, sizes=sizes, ranges=ranges, tensor_types=[(t.dtype, t.device) for t in tensors],
        training=training_flags(module), out_spec=program.call_spec.out_spec, attributes=attributes,
        autocast=ambient_autocast() if inlined_autocast_block else None,
    )


def _sizes_and_ranges(program: Any) -> Tuple[List[Tuple[Any, ...]], Dict[Any, Tuple[float, float]]]:
    """The tensor arguments' sizes in the captured graph (ints, or expressions of export's symbols),
    and the symbols' ranges."""
    values = [n.meta.get("val") for n in program.graph_module.graph.nodes if n.op == "placeholder"]
    users = [v for v, s in zip(values, program.graph_signature.input_specs) if s.kind.name == "USER_INPUT"]
    sizes = [tuple(d if isinstance(d, int) else d.node.expr for d in v.shape)
             for v in users if isinstance(v, torch.Tensor)]
    ranges = {symbol: (_bound(r.lower, -math.inf), _bound(r.upper, math.inf))
              for symbol, r in program.range_constraints.items()}
    return sizes, ranges


def _refuse_plain_parameters(module: torch.nn.Module) -> None:
    """Export takes a parameter only as an nn.Parameter; torch.func.functional_call puts the tensors
    it is given in their place."""
    plain = next((name for name, p in module.named_parameters() if not isinstance(p, torch.nn.Parameter)), None)
    if plain is not None:
        raise CaptureError(f"{type(module).__name__}'s parameter {plain} is a plain tensor, not an nn.Parameter, as "
                           "torch.func.functional_call makes it, and export captures only parameters: call the "
                           "checkpointed model with its own parameters, or functional_call the model without jitckpt")


def outputs(capture_: Capture, result: Any) -> Any:
    flat = list(result) if isinstance(result, tuple) else [result]
    return pytree.tree_unflatten(flat, capture_.out_spec)


def arguments(capture_: Capture, flat: List[Any]) -> List[Any]:
    return [flat[i] for i in capture_.passed]


def _bound(value: Any, unbounded: float) -> float:
    """A range's end as a number; `unbounded` where it is infinite (an unbacked symbol's, from a
    size the data sets, may be below zero as well)."""
    return int(value) if getattr(value, "is_finite", True) and getattr(value, "is_Integer", True) else unbounded
