"""The Python values a model's modules hold (a temperature, a dropout's probability, a flag):
export records what forward reads of them as constants of the captured graph.

Takes the model; `record` lists every submodule's attributes that hold a number, a string, None or
a tuple of them, with their values, so that a capture serves only while they hold (`hold`), and
says which changed (`changed`; `change` in words): a value the user sets between calls (an
annealed temperature) makes a new capture instead of a graph that reads the old one. (Export puts
back what its run of forward sets; a training call's graph sets none of them either.)
"""
import dataclasses
from typing import Any, List

import torch

_SCALARS = (bool, int, float, str, type(None))
_NOT_READ_BY_FORWARD = {"training", "_is_full_backward_hook", "_compiled_call_impl"}  # flags: training_flags
_MISSING = object()


@dataclasses.dataclass
class Attribute:
    module: torch.nn.Module
    name: str  # qualified: "blocks.0.drop.p"
    attribute: str
    value: Any


def _scalar(value: Any) -> bool:
    return type(value) in _SCALARS or (type(value) is tuple and all(type(v) in _SCALARS for v in value))


def record(model: torch.nn.Module) -> List[Attribute]:
    found = []
    stack = [("", model)]
    while stack:
        prefix, module = stack.pop()
        for attribute, value in vars(module).items():
            if attribute not in _NOT_READ_BY_FORWARD and _scalar(value):
                found.append(Attribute(module, f"{prefix}{attribute}", attribute, value))
        stack.extend((f"{prefix}{name}.", child) for name, child in module._modules.items() if child is not None)
    return found


def _now(attribute: Attribute) -> Any:
    return attribute.module.__dict__.get(attribute.attribute, _MISSING)


def hold(attributes: List[Attribute]) -> bool:
    for a in attributes:
        now = _now(a)
        if now is not a.value and now != a.value:
            return False
    return True


def changed(attributes: List[Attribute]) -> List[Attribute]:
    """The attributes that no longer hold their recorded values."""
    return [a for a in attributes if _now(a) is not a.value and _now(a) != a.value]


def change(attribute: Attribute) -> str:
    """'name (old to new)'."""
    now = _now(attribute)
    return f"{attribute.name} ({attribute.value!r} to {'deleted' if now is _MISSING else repr(now)})"
