"""Whether a capture with dynamic sizes holds at other sizes within the ranges export proved.

Export (2.6 to 2.14) may specialize a size that an op computes from a dynamic one (a batch norm's
output over a length that was 1 where the model was captured) without bounding the input's size
in its ranges: the graph keeps that size as a constant, and a call at another size in the range
fails part way (a view to the old size) or, on 2.14, at a guard of export's own. `sizes_hold` runs
the exported graph on fake tensors at the call's sizes and at three times each dynamic one (which
keeps each size's divisors, as a reshape into heads needs them): a graph that runs at the first and
not at the second does not hold, and the model is captured again with the call's sizes.
"""
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode

from .recurrent_layers import recurrent_ops

Sizes = List[Tuple[Any, ...]]  # per tensor argument, each dimension an int or a sympy expression


def _runs(module: torch.nn.Module, flat: List[Any], spec: Any, shapes: List[List[int]]) -> bool:
    """Whether the module runs on fake tensors of these shapes (the call's dtypes and devices)."""
    given = iter(shapes)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            # fake parameters and buffers too: forward's in-place updates (batch norm's counters) stay off the model's
            state = {name: mode.from_tensor(t) for name, t in [*module.named_parameters(), *module.named_buffers()]}
            leaves = [torch.empty(next(given), dtype=x.dtype, device=x.device) if isinstance(x, torch.Tensor) else x
                      for x in flat]
            args, kwargs = pytree.tree_unflatten(leaves, spec)
            torch.func.functional_call(module, state, args, kwargs)
        return True
    except Exception:  # whatever stops it: the graph at those sizes, or what fake tensors cannot run
        return False


def _other_sizes(tensors: List[torch.Tensor], sizes: Sizes,
                 ranges: Dict[Any, Tuple[float, float]]) -> Optional[List[List[int]]]:
    """The tensors' shapes with each dynamic size three times the call's where its range allows;
    None where none does."""
    hints = {}
    for tensor, shape in zip(tensors, sizes):
        for size, captured in zip(tensor.shape, shape):
            if not isinstance(captured, int) and captured.is_Symbol:
                hints[captured] = size
    other = {}
    for symbol, size in hints.items():
        low, high = ranges.get(symbol, (0, float("inf")))
        other[symbol] = 3 * size if low <= 3 * size <= high else size
    if other == hints:
        return None
    return [[captured if isinstance(captured, int) else
             int(captured.subs(other)) if captured.free_symbols <= other.keys() else size
             for size, captured in zip(tensor.shape, shape)] for tensor, shape in zip(tensors, sizes)]


def _recurrent(program: Any) -> bool:
    """Whether the graph holds a recurrent layer, whose fake run steps through the length (seconds
    at a few hundred steps): not probed."""
    return any(n.op == "call_function" and n.target in recurrent_ops() for n in program.graph_module.graph.nodes)


def sizes_hold(program: Any, flat: List[Any], spec: Any, sizes: Sizes, ranges: Dict[Any, Tuple[float, float]]) -> bool:
    """False where the exported program runs at the call's sizes but not at others in its ranges."""
    tensors = [x for x in flat if isinstance(x, torch.Tensor)]
    other = _other_sizes(tensors, sizes, ranges)
    if other is None or _recurrent(program):
        return True
    try:
        module = program.module()
    except Exception:  # nothing to run: the capture stands as export made it
        return True
    return not _runs(module, flat, spec, [list(t.shape) for t in tensors]) or _runs(module, flat, spec, other)
