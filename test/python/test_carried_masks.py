"""A float attention mask made in forward and carried across cuts needs no gradient, and the model
gives it none: where jitckpt gave it one, PyTorch 2.x's CPU attention picked another kernel than
the unmodified model's (its flash kernel refuses a mask that requires grad) and the gradients
differed in their last bits. Trained bit for bit like the unmodified model at the smallest limit
and between it and no limit, with example inputs and at the first call: a causal decoder with
multi-head attention, the MoE decoder and the Whisper-like encoder-decoder (test/models/)."""
import warnings

import pytest
import torch
from torch import Tensor, nn

import jitckpt

import moe_dit_speech


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Linear(d, d)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        y = self.norm(x)
        x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(x)


class MaskedDecoder(nn.Module):
    """The mask is made in forward from the input's length, then read by every block."""

    def __init__(self, d: int = 32, blocks: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(blocks)])

    def forward(self, x: Tensor) -> Tensor:
        t = x.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), 1)
        for block in self.blocks:
            x = block(x, mask)
        return x


def _decoder_batches(g: torch.Generator):
    return [(torch.randn(4, 16, 32, generator=g),) for _ in range(2)]


MODELS = {
    "decoder": (MaskedDecoder, _decoder_batches, lambda output, inputs: output.pow(2).mean()),
    "moe": moe_dit_speech.ARCHITECTURES["moe"],
    "whisper": moe_dit_speech.ARCHITECTURES["whisper"],
}


def scripted(name: str) -> torch.jit.ScriptModule:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.script(MODELS[name][0]().train())


def train(model, name: str, steps: int = 2):
    """Outputs and clipped gradients of each step (two micro-batches), then the parameters, with
    AdamW."""
    _, make_batches, loss_of = MODELS[name]
    batches = make_batches(torch.Generator().manual_seed(1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    record = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        for k, inputs in enumerate(batches):
            torch.manual_seed(100 * step + k)
            with torch.jit.optimized_execution(False), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                output = model(*inputs)
                (loss_of(output, inputs) / len(batches)).backward()
            record.append({"output": (output[0] if isinstance(output, tuple) else output).detach().clone()})
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        record.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        optimizer.step()
    record.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return record


def assert_same(record, reference) -> None:
    assert len(record) == len(reference)
    for i, (got, want) in enumerate(zip(record, reference)):
        assert got.keys() == want.keys(), f"record {i}"
        for key in want:
            assert torch.equal(got[key], want[key]), \
                f"record {i}, {key}: max abs difference {(got[key] - want[key]).abs().max().item():.3g}"


@pytest.fixture(scope="module", params=list(MODELS))
def subject(request):
    name = request.param
    reference = train(scripted(name), name)
    assert_same(train(scripted(name), name), reference)  # the reference is deterministic
    batch = MODELS[name][1](torch.Generator().manual_seed(1))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unconstrained = jitckpt.checkpoint(scripted(name), batch, memory_limit=None, profile_repeats=1)
    return name, reference, batch, unconstrained


@pytest.mark.parametrize("limit", ["min", "mid"])
@pytest.mark.parametrize("deferred", [False, True], ids=["example inputs", "first call"])
def test_trains_bit_for_bit_at_a_limit(subject, limit, deferred):
    name, reference, batch, unconstrained = subject
    if limit == "mid":
        smallest = jitckpt.checkpoint(scripted(name), batch, memory_limit="min", profile_repeats=1,
                                      reuse_profile_of=unconstrained)
        limit = (jitckpt.plan(smallest)["memory_limit"] + jitckpt.plan(unconstrained)["predicted_peak"]) // 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = jitckpt.checkpoint(scripted(name), None if deferred else batch, memory_limit=limit,
                                   profile_repeats=1)
    record = train(model, name)
    assert jitckpt.plan(model)["num_stages"] > 1
    # Planned at the first call, the chain is cut by its bytes as with example inputs.
    assert jitckpt.plan(model)["labels"] == jitckpt.plan(unconstrained)["labels"]
    assert_same(record, reference)
