"""Plain nn.Modules through torch.export whose gradients depend on the autograd graph's shape, not
only on its ops: the graph a capture runs must record what the eager model records. A slice that
Python's indexing skips at the sizes of the call, and views of one tensor that TorchScript's
optimizing executor would merge, each give other bits when the capture records them otherwise."""
import pytest
import torch
import torch.nn.functional as F

import jitckpt
from jitckpt.export import capture

from test_eager_modules import same_gradients_as_the_model

pytestmark = pytest.mark.skipif(not capture.available(), reason="torch.export's training capture needs PyTorch 2.6")


class TrimmedPositions(torch.nn.Module):
    """SEW-D's pooled frames plus convolutional positions, each taken to the shorter length with
    `x[..., :n]`: at these sizes both are the whole length, which indexing skips; the gradient then
    reaches the GELU as the transpose after the sum leaves it (not contiguous), and the GELU's
    backward rounds differently on a contiguous copy."""

    def __init__(self) -> None:
        super().__init__()
        self.project = torch.nn.Linear(8, 16)
        self.positions = torch.nn.Conv1d(16, 16, 4, padding=2, stride=2, groups=4)
        self.pool = torch.nn.AvgPool1d(2, 2)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = self.project(x).transpose(1, 2)
        positions = F.gelu(self.positions(frames)[:, :, :-1])
        pooled = self.pool(frames)
        n = min(positions.size(-1), pooled.size(-1))
        y = (pooled[..., :n] + positions[..., :n]).transpose(1, 2)
        for layer in self.layers:
            y = y + F.gelu(layer(y))
        return y


def test_a_slice_indexing_skips_at_the_calls_sizes_passes_the_gradient_on_as_it_comes():
    x = torch.randn(4, 99, 8)  # a length whose dimension export keeps dynamic
    module = same_gradients_as_the_model(TrimmedPositions, lambda module: module(x).pow(2).sum())
    assert jitckpt.plan(module)["num_stages"] >= 4


class SharedPositions(torch.nn.Module):
    """A normalized table of positions that every layer reads through `table[0:32, :]` (the whole
    table: export records an alias per layer), as DeBERTa's relative embeddings: the table's
    gradient sums each alias's two uses, then the aliases. Merged into one alias, four uses would
    be summed in another order."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(32, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.query = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))
        self.key = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        table = self.norm(self.table.weight)
        for query, key in zip(self.query, self.key):
            positions = table[0:32, :]
            scores = query(x) @ key(positions).T
            x = x + scores.softmax(-1) @ query(positions)
        return x


def test_views_of_one_tensor_before_the_chain_are_not_merged():
    x = torch.randn(4, 24, 16)
    module = same_gradients_as_the_model(SharedPositions, lambda module: module(x).pow(2).sum())
    assert jitckpt.plan(module)["num_stages"] >= 3
