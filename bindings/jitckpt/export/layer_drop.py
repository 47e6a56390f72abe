"""LayerDrop at zero, decided while export traces: a model that skips a layer where
`torch.rand([]) < self.layerdrop` (44 of Hugging Face's families: OPT, BART, Whisper, Wav2Vec2, ...)
with its LayerDrop off.

Takes a module; while the context is open, every LayerDrop probability of zero that the model or
its configs hold (attributes `layerdrop` and `*_layerdrop`) is a value that compares as 0.0 with
numbers and, with a tensor, as 0.0 with a draw of torch.rand: `draw < it` is False and `draw >= it`
is True, which holds for every draw in [0, 1). Export then records the draw (which advances the
generator as the model's run does) and no branch on it; it cannot decide a comparison with the
draw's value itself. A LayerDrop above zero skips layers at random, step by step, and stays for
export to refuse (layer_drops_above_zero names them for the error).
"""
import contextlib
import numbers
from typing import Any, Iterator, List, Tuple

import torch


class ZeroLayerDrop:
    """0.0 as LayerDrop's probability; against a tensor, exact for values in [0, 1)."""

    def __bool__(self) -> bool:
        return False

    def __float__(self) -> float:
        return 0.0

    def __repr__(self) -> str:
        return "0.0"

    def __gt__(self, other: Any) -> Any:  # 0.0 > other; also `other < 0.0`
        return False if isinstance(other, torch.Tensor) else _compare(other, float.__gt__)

    def __le__(self, other: Any) -> Any:  # 0.0 <= other; also `other >= 0.0`
        return True if isinstance(other, torch.Tensor) else _compare(other, float.__le__)

    # With a tensor, these depend on the draw (it may be 0.0): left to export to refuse.
    def __lt__(self, other: Any) -> Any:
        return NotImplemented if isinstance(other, torch.Tensor) else _compare(other, float.__lt__)

    def __ge__(self, other: Any) -> Any:
        return NotImplemented if isinstance(other, torch.Tensor) else _compare(other, float.__ge__)

    def __eq__(self, other: Any) -> Any:
        return NotImplemented if isinstance(other, torch.Tensor) else _compare(other, float.__eq__)

    __hash__ = None  # type: ignore[assignment]


def _compare(other: Any, op: Any) -> Any:
    """0.0 `op` other, for a real number (or another ZeroLayerDrop); NotImplemented otherwise."""
    if isinstance(other, (numbers.Real, ZeroLayerDrop)):
        return op(0.0, float(other))
    return NotImplemented


def _holders(module: torch.nn.Module) -> Iterator[Any]:
    seen = set()
    for m in module.modules():
        for holder in (m, getattr(m, "config", None)):
            if holder is not None and id(holder) not in seen:
                seen.add(id(holder))
                yield holder


def layer_drops_above_zero(module: torch.nn.Module) -> List[str]:
    """The names of the LayerDrop probabilities above zero that the model or its configs hold."""
    return sorted({name for holder in _holders(module) for name, value in vars(holder).items()
                   if _is_layer_drop(name, value) and value > 0})


def _is_layer_drop(name: str, value: Any) -> bool:
    return (name == "layerdrop" or name.endswith("_layerdrop")) and isinstance(value, numbers.Real) \
        and not isinstance(value, bool)


@contextlib.contextmanager
def layer_drop_decided(module: torch.nn.Module) -> Iterator[None]:
    replaced: List[Tuple[Any, str, Any]] = []
    try:
        for holder in _holders(module):
            for name, value in list(vars(holder).items()):
                if _is_layer_drop(name, value) and value == 0:
                    replaced.append((holder, name, value))
                    object.__setattr__(holder, name, ZeroLayerDrop())
        yield
    finally:
        for holder, name, value in reversed(replaced):
            object.__setattr__(holder, name, value)
