"""The torch.autograd.Functions a model applies while export traces it.

Export records a Function's forward as the ops it runs and keeps no trace of its own backward: the
captured graph's gradient would be autograd's of those ops, not the Function's (a gradient reversal
layer's sign lost, a straight-through estimator's gradient made zero, a hand-written derivative
rounded otherwise). capture.py refuses a model that applies one, with `refusal`'s words. Takes
nothing; the context yields the list of the Function classes applied while it is open (in order,
repeated) to inputs that a gradient would flow back to, but those whose backward is autograd's of
their forward by construction (torch.utils.checkpoint's reentrant checkpoint, which recomputes its
forward and differentiates that).
"""
import contextlib
from typing import Any, Iterator, List

import torch
import torch.utils._pytree as pytree
import torch.utils.checkpoint

_SAME_AS_AUTOGRAD = (torch.utils.checkpoint.CheckpointFunction,)


@contextlib.contextmanager
def functions_applied() -> Iterator[List[type]]:
    applied: List[type] = []
    original = torch.autograd.Function.__dict__["apply"]  # a classmethod, in Python or in C

    def recording(cls: type, *args, **kwargs):
        if not issubclass(cls, _SAME_AS_AUTOGRAD) and _differentiated(args, kwargs):
            applied.append(cls)
        return original.__get__(None, cls)(*args, **kwargs)

    torch.autograd.Function.apply = classmethod(recording)  # type: ignore[method-assign]
    try:
        yield applied
    finally:
        torch.autograd.Function.apply = original  # type: ignore[method-assign]


def _differentiated(args: Any, kwargs: Any) -> bool:
    """Whether autograd would run the Function's backward: gradients on, an input that requires
    one (torch.vmap's indexing Functions on a mask's integers do not)."""
    return torch.is_grad_enabled() and any(
        isinstance(leaf, torch.Tensor) and leaf.requires_grad for leaf in pytree.tree_leaves((args, kwargs)))


def refusal(module: Any, functions: List[type]) -> str:
    names = ", ".join(dict.fromkeys(f"{f.__module__}.{f.__qualname__}" for f in functions))
    return (f"jitckpt cannot capture {type(module).__name__} with torch.export: it applies torch.autograd.Function "
            f"{names}, whose own backward export does not keep (it records the forward's ops, whose gradients "
            "would silently replace the Function's); call it from a function decorated with @torch.jit.ignore, and "
            "the model trains through TorchScript, where the Function runs as Python with its own backward")
