"""Module hooks of a model that export captures: which of them a captured graph cannot honour.

Export runs forward once, on fake tensors, and records its ops: a forward hook (or pre-hook) runs
then and never at a training call, so what it returns is in the graph but what it stores elsewhere
(a feature kept for a distillation loss, a statistic logged) is export's fake tensor, once. Module
backward hooks never fire: the module's boundary is gone from the stages' graphs. Takes the model;
`refuse_backward_hooks` raises CaptureError naming them (`has_backward_hooks` says whether a part
has any); `warn_forward_hooks` warns once naming them, leaving out the hooks PyTorch registers to
compute a weight (the old spectral and weight norm), which the graph holds whole.
"""
import warnings
from typing import Any, Dict, List

import torch
from torch.nn.utils.spectral_norm import SpectralNorm
from torch.nn.utils.weight_norm import WeightNorm

from .aten_graph import CaptureError

_WEIGHT_HOOKS = (SpectralNorm, WeightNorm)
_GLOBAL = torch.nn.modules.module


def _hooked(model: torch.nn.Module, kinds: List[str], global_kinds: List[str]) -> List[str]:
    """'name (hook)' for each hook of those kinds on the model's modules, then the global ones."""
    found = []
    for name, module in model.named_modules():
        for kind in kinds:
            hooks: Dict[int, Any] = getattr(module, kind, None) or {}
            for hook in hooks.values():
                if not isinstance(hook, _WEIGHT_HOOKS):
                    found.append(f"{name or type(model).__name__} ({_described(hook)})")
    for kind in global_kinds:
        found += [f"every module ({_described(hook)})" for hook in (getattr(_GLOBAL, kind, None) or {}).values()]
    return found


def _described(hook: Any) -> str:
    code = getattr(hook, "__code__", None)
    name = getattr(hook, "__qualname__", type(hook).__qualname__)
    return f"{name} at {code.co_filename}:{code.co_firstlineno}" if code is not None else name


def _backward_hooked(model: torch.nn.Module) -> List[str]:
    return _hooked(model, ["_backward_hooks", "_backward_pre_hooks"],
                   ["_global_backward_hooks", "_global_backward_pre_hooks"])


def has_backward_hooks(model: torch.nn.Module) -> bool:
    return bool(_backward_hooked(model))


def refuse_backward_hooks(model: torch.nn.Module) -> None:
    hooked = _backward_hooked(model)
    if hooked:
        raise CaptureError(f"{type(model).__name__} has module backward hooks, which a checkpointed model cannot call "
                           f"(its stages do not keep the modules' boundaries): {', '.join(hooked)}; remove them, or "
                           "hook the gradients of the parameters instead (`parameter.register_hook(...)` or "
                           "`register_post_accumulate_grad_hook`), which fire as in the model")


def warn_forward_hooks(model: torch.nn.Module) -> None:
    hooked = _hooked(model, ["_forward_pre_hooks", "_forward_hooks"],
                     ["_global_forward_pre_hooks", "_global_forward_hooks"])
    if hooked:
        warnings.warn(f"jitckpt ran the forward hooks of {type(model).__name__} once, while it captured the model, on "
                      f"export's fake tensors, and training calls do not run them: {', '.join(hooked)}; what they "
                      "return is part of the captured graph, but what they store elsewhere is not (return such "
                      "values from forward instead)", stacklevel=2)
