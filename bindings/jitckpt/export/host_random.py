"""Draws from Python's and NumPy's random generators while torch.export traces a model.

Export runs forward once and records what those generators return as constants of the graph, so
every training step would reuse the capture's draw where the model draws anew at each call
(SpecAugment's time and feature masks in Hugging Face's speech models, drawn with NumPy). Draws
from torch's generators are ops of the graph, made at each call and replayed where a stage is
recomputed. While `host_draws` is open, the module-level functions of `random` and `numpy.random`
record each call; capture.py refuses a model that made any, with `refusal`'s words. Takes nothing;
the context yields the list of (function, the model's line that called it).
"""
import contextlib
import os
import random
import sys
import traceback
from typing import Any, Callable, Iterator, List, Optional, Tuple

import torch

_PYTHON_DRAWS = ("random", "uniform", "randint", "randrange", "choice", "choices", "shuffle", "sample",
                 "gauss", "normalvariate", "getrandbits", "betavariate", "expovariate")


def _generators() -> List[Tuple[Any, str, List[str]]]:
    """(module, its name, the names of its drawing functions): numpy.random's too where NumPy is
    imported (a model that draws with it has imported it)."""
    found: List[Tuple[Any, str, List[str]]] = [(random, "random", list(_PYTHON_DRAWS))]
    if "numpy" in sys.modules:  # NumPy 2 loads numpy.random at its first use
        import numpy.random as numpy_random

        names = [name for name in dir(numpy_random)
                 if not name.startswith("_") and name not in ("seed", "get_state", "set_state")
                 and callable(getattr(numpy_random, name)) and not isinstance(getattr(numpy_random, name), type)]
        found.append((numpy_random, "numpy.random", names))
    return found


_TORCH = os.path.dirname(torch.__file__) + os.sep


def _caller() -> Optional[str]:
    """The innermost frame outside the generators' modules and this file: the model's line, or
    None where it is torch's own (export's machinery, not the model)."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not any(part in frame.filename for part in ("/random.py", "numpy/random", __file__)):
            return None if frame.filename.startswith(_TORCH) else f"{frame.filename}:{frame.lineno} ({frame.line})"
    return None


@contextlib.contextmanager
def host_draws() -> Iterator[List[Tuple[str, str]]]:
    drawn: List[Tuple[str, str]] = []
    saved: List[Tuple[Any, str, Any]] = []

    def recording(qualified: str, draw: Callable[..., Any]) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            caller = _caller()
            if caller is not None:
                drawn.append((qualified, caller))
            return draw(*args, **kwargs)
        return record

    for module, module_name, names in _generators():
        for name in names:
            draw = getattr(module, name)
            saved.append((module, name, draw))
            setattr(module, name, recording(f"{module_name}.{name}", draw))
    try:
        yield drawn
    finally:
        for module, name, draw in saved:
            setattr(module, name, draw)


def refusal(module: Any, drawn: List[Tuple[str, str]]) -> str:
    where = "; ".join(f"{name} at {line}" for name, line in dict(drawn).items())
    return (f"jitckpt cannot capture {type(module).__name__} with torch.export: its forward draws random numbers with "
            f"Python or NumPy ({where}), which export records as constants, so that every step would reuse one draw; "
            "draw them with torch (torch.rand, torch.randint), whose draws jitckpt keeps, or make them outside forward "
            "and pass them in (Hugging Face's speech models: pass mask_time_indices, or set config.mask_time_prob and "
            "config.mask_feature_prob to 0)")
