"""The torch.autograd.Functions a model applies, kept whole through torch.export.

Export records a Function's forward as the ops it runs and keeps no trace of its own backward: the
captured graph's gradient would be autograd's of those ops, not the Function's (a gradient reversal
layer's sign lost, a straight-through estimator's gradient made zero). While `functions_as_operators`
is open, a Function applied to inputs that a gradient flows back to is called instead as one
operator of jitckpt's, `jitckpt_functions::<n>_<Function>` (one per Function and non-tensor
arguments), which takes the call's tensors and applies the Function itself: export records one
node, and the runtime runs the Function's forward and records its own backward, as the model does.
The operators are marked random, so that a stage recomputed replays the random state its Functions
drew from. torch.utils.checkpoint's reentrant Function, whose backward is autograd's of its forward
by construction, is captured as the function it checkpoints, called with gradients on (its own
forward runs that function without them, which export would record, leaving the layer's
parameters without gradients; jitckpt's schedule recomputes in its place). A Function that takes
a size computed from the input, or returns other than tensors and constants, raises CaptureError.
"""
import contextlib
import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
import torch.utils._pytree as pytree
import torch.utils.checkpoint

from .aten_graph import CaptureError

_CHECKPOINT = torch.utils.checkpoint.CheckpointFunction  # forward(ctx, run_function, preserve_rng_state, *args)
_NAMESPACE = "jitckpt_functions"
_APPLY = torch.autograd.Function.__dict__.get("apply")  # a classmethod (PyTorch 2; 1.13 has no export)


class _Operator:
    """One Function with fixed non-tensor arguments, as an operator over the call's tensors."""

    def __init__(self, function: type, spec: Any, constants: List[Any], name: str) -> None:
        self.function, self.spec, self.constants, self.name = function, spec, constants, name
        self.result_spec: Optional[Any] = None
        self.result_constants: Optional[List[Any]] = None  # per result leaf: None for a tensor
        self.op: Any = None

    def run(self, tensors: List[torch.Tensor]) -> List[torch.Tensor]:
        """The kernel: applies the Function to the call's arguments; returns its tensors."""
        given = iter(tensors)
        leaves = [next(given) if c is _TENSOR else c for c in self.constants]
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        result = _APPLY.__get__(None, self.function)(*args, **kwargs)
        leaves, spec = pytree.tree_flatten(result)
        constants = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        if self.result_spec is None:
            if any(isinstance(c, (torch.SymInt, torch.SymFloat, torch.SymBool)) for c in constants):
                raise CaptureError(f"{_qualified(self.function)} returns a size computed from the input")
            self.result_spec, self.result_constants = spec, constants
        elif spec != self.result_spec or constants != self.result_constants:
            raise RuntimeError(f"jitckpt: {_qualified(self.function)} returned values of another kind than when "
                               "jitckpt captured the model (its non-tensor results must not change)")
        return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]

    def result(self, tensors: List[torch.Tensor]) -> Any:
        """What the Function returns, from the operator's tensors."""
        assert self.result_spec is not None and self.result_constants is not None
        given = iter(tensors)
        leaves = [next(given) if c is None else c for c in self.result_constants]
        return pytree.tree_unflatten(leaves, self.result_spec)


class _Tensor:
    def __repr__(self) -> str:
        return "<tensor>"


_TENSOR = _Tensor()  # a tensor leaf's place among an operator's constants
_library: Optional[torch.library.Library] = None
_operators: Dict[Any, _Operator] = {}


def _operator(function: type, spec: Any, constants: List[Any]) -> _Operator:
    """The operator for this Function and these non-tensor arguments, defined at first use."""
    global _library
    try:
        key: Any = (function, repr(spec), tuple((type(c), c) for c in constants))  # (2.6's specs: no hash)
        hash(key)
    except TypeError:  # an unhashable constant: an operator of its own
        key = object()
    if key in _operators:
        return _operators[key]
    if _library is None:
        _library = torch.library.Library(_NAMESPACE, "FRAGMENT")
    name = f"f{len(_operators)}_{re.sub(r'[^0-9A-Za-z_]', '_', function.__name__)}"
    operator = _Operator(function, spec, constants, name)
    _library.define(f"{name}(Tensor?[] tensors) -> Tensor[]", tags=(torch.Tag.nondeterministic_seeded,))

    def kernel(tensors: List[Optional[torch.Tensor]]) -> List[torch.Tensor]:
        return operator.run([t for t in tensors if t is not None])

    def fake(tensors: List[Optional[torch.Tensor]]) -> List[torch.Tensor]:
        with torch.no_grad():
            return kernel(tensors)

    _library.impl(name, kernel, "Autograd")  # records the Function's own backward
    _library.impl(name, kernel, "CompositeExplicitAutograd")  # where autograd is off (inference mode)
    torch.library.register_fake(f"{_NAMESPACE}::{name}", fake, lib=_library)
    operator.op = getattr(getattr(torch.ops, _NAMESPACE), name).default
    _operators[key] = operator
    return operator


def _differentiated(args: Any, kwargs: Any) -> bool:
    """Whether autograd would run the Function's backward: gradients on, an input that requires
    one (torch.vmap's indexing Functions on a mask's integers do not)."""
    return torch.is_grad_enabled() and any(
        isinstance(leaf, torch.Tensor) and leaf.requires_grad for leaf in pytree.tree_leaves((args, kwargs)))


def _as_operator(function: type, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if any(isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)) for leaf in leaves):
        raise CaptureError(f"{_qualified(function)} takes a size computed from the input")
    constants = [_TENSOR if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    operator = _operator(function, spec, constants)
    return operator.result(operator.op([leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]))


@contextlib.contextmanager
def functions_as_operators() -> Iterator[None]:
    """While open, Functions applied where a gradient flows through them run as jitckpt's
    operators (the module's docstring)."""

    def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
        if _differentiated(args, kwargs):
            if issubclass(cls, _CHECKPOINT):
                return args[0](*args[2:])  # the same draws: the checkpoint's forward draws as it runs
            return _as_operator(cls, args, kwargs)
        return _APPLY.__get__(None, cls)(*args, **kwargs)

    torch.autograd.Function.apply = classmethod(apply)  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.autograd.Function.apply = _APPLY  # type: ignore[method-assign]


def _qualified(function: type) -> str:
    return f"torch.autograd.Function {function.__module__}.{function.__qualname__}"
