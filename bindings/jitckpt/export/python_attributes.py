"""The Python values a model's modules hold (a temperature, a dropout's probability, a flag):
export records what forward reads of them as constants of the captured graph.

Takes the model; `record` lists its submodules' attributes that hold a number, a string, None or
a tuple of them, with their values (those that forward read while `reads_recorded`, where given),
so that a capture serves only while they hold (`hold`), and says which changed (`changed`; `change`
in words): a value the user sets between calls (an annealed temperature) makes a new capture
instead of a graph that reads the old one, and one that forward does not read (a step counter kept
for logging) none. (Export puts back what its run of forward sets; a training call's graph sets
none of them either.)
"""
import contextlib
import dataclasses
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

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


Reads = Set[Tuple[int, str]]  # (id(module), attribute)
_READER_CLASSES: Dict[type, type] = {}


def _reader_class(cls: type) -> type:
    """`cls` with a __getattribute__ that adds what it reads to the instance's `_jitckpt_reads`
    (a class attribute of the subclass, set while recording), named as `cls` is."""
    if cls not in _READER_CLASSES:
        def __getattribute__(self: Any, name: str) -> Any:
            type(self)._jitckpt_reads.add((id(self), name))
            return super(reader, self).__getattribute__(name)

        reader = type(cls.__name__, (cls,), {"__getattribute__": __getattribute__, "_jitckpt_reads": set(),
                                             "__qualname__": cls.__qualname__, "__module__": cls.__module__})
        _READER_CLASSES[cls] = reader
    return _READER_CLASSES[cls]


@contextlib.contextmanager
def reads_recorded(model: torch.nn.Module, reads: Reads) -> Iterator[None]:
    """Adds to `reads` every attribute read on the model's modules within (forward's, during a
    capture): each module's class is a subclass that records for the while, as FSDP2's fully_shard
    swaps classes. Where a module's class cannot be subclassed or swapped, `reads` gets (0, "")
    instead: read everything."""
    swapped: List[Tuple[torch.nn.Module, type]] = []
    try:
        for module in model.modules():
            cls = type(module)
            try:
                reader = _reader_class(cls)
                module.__class__ = reader
            except Exception:  # a metaclass or a layout of its own
                reads.add((0, ""))
                continue
            reader._jitckpt_reads = reads
            swapped.append((module, cls))
        yield
    finally:
        for module, cls in swapped:
            module.__class__ = cls


def record(model: torch.nn.Module, reads: Optional[Reads] = None) -> List[Attribute]:
    """The attributes forward may read: all, or those in `reads` (reads_recorded's)."""
    every = reads is None or (0, "") in reads
    found = []
    stack = [("", model)]
    while stack:
        prefix, module = stack.pop()
        for attribute, value in vars(module).items():
            if attribute not in _NOT_READ_BY_FORWARD and _scalar(value) and (every or (id(module), attribute) in reads):
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
