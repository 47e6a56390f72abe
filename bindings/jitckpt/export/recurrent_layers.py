"""Recurrent layers (nn.LSTM, nn.GRU, nn.RNN) captured with their sequence length dynamic.

Export records each such layer as one ATen op (aten::lstm, aten::gru, aten::rnn_tanh,
aten::rnn_relu), but works out the op's output sizes by running PyTorch's decomposition of it on
fake tensors, which steps through the sequence an element at a time and so makes its length
static: every new length was a capture of its own, cut and profiled again. While
`recurrent_lengths_dynamic` is open, those ops' fake outputs come from their arguments' sizes
alone, laid out as the decomposition lays them out (and as the CPU kernels do: a batch-first
output is the transpose of a contiguous (length, batch, features) tensor). Only fake tensors take
that path, and only what export records changes: training runs the op itself.
"""
import contextlib
from typing import Any, Iterator, List

import torch
import torch._decomp
from torch._C import DispatchKey
from torch._subclasses.fake_tensor import FakeTensor

_COMPOSITE = DispatchKey.CompositeImplicitAutograd


def recurrent_ops() -> List[Any]:
    aten = torch.ops.aten
    return [aten.lstm.input, aten.gru.input, aten.rnn_tanh.input, aten.rnn_relu.input]


def _fake_outputs(original: Any) -> Any:
    """The op's outputs from its arguments' sizes: (output, h_n) or, for an LSTM, (output, h_n, c_n)."""

    def outputs(input: torch.Tensor, hx: Any, params: Any, has_biases: bool, num_layers: int, dropout: float,
                train: bool, bidirectional: bool, batch_first: bool) -> Any:
        states = [hx] if isinstance(hx, torch.Tensor) else list(hx)
        if not isinstance(input, FakeTensor) or input.dim() != 3 or any(s.dim() != 3 for s in states):
            return original(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        # Export's tracing runs this kernel under autograd, which records the decomposition's ops:
        # the outputs must depend on the inputs that need gradients as well, or later code takes
        # them for constants (a torch.autograd.Function applied to them would not be kept whole).
        needing = [t for t in [input, *states, *params] if t.requires_grad]
        zero = sum(t.sum() for t in needing) * 0 if needing and torch.is_grad_enabled() else None
        steps = input.transpose(0, 1) if batch_first else input
        directions = 2 if bidirectional else 1
        made = [steps.new_empty((steps.size(0), steps.size(1), directions * states[0].size(2)))]
        made += [s.new_empty(s.shape) for s in states]
        if zero is not None:
            made = [t + zero for t in made]
        return (made[0].transpose(0, 1) if batch_first else made[0], *made[1:])

    return outputs


@contextlib.contextmanager
def recurrent_lengths_dynamic() -> Iterator[None]:
    """While open, the recurrent ops' fake outputs keep the sequence length dynamic (module docstring)."""
    table = torch._decomp.decomposition_table
    saved = [(op, op.py_kernels.get(_COMPOSITE), table.get(op)) for op in recurrent_ops()]
    try:
        for op, kernel, decomposition in saved:
            if kernel is not None:
                op.py_kernels[_COMPOSITE] = _fake_outputs(kernel)
            if decomposition is not None:
                table[op] = _fake_outputs(decomposition)
            op._dispatch_cache.clear()
        yield
    finally:
        for op, kernel, decomposition in saved:
            if kernel is not None:
                op.py_kernels[_COMPOSITE] = kernel
            if decomposition is not None:
                table[op] = decomposition
            op._dispatch_cache.clear()
