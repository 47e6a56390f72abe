"""Training loops of PyTorch 2.x users beyond the AdamW loops of the other files: float16 autocast
with a GradScaler, whose skipped steps (gradients that overflow) must be skipped alike, and models
whose layers already checkpoint themselves with torch.utils.checkpoint (Hugging Face's
gradient_checkpointing_enable() left on). Each trains bit for bit like the model, itself trained
twice first."""
import functools
from typing import Any, List

import pytest
import torch

import jitckpt
from jitckpt.export import capture

import hf_style

pytestmark = pytest.mark.skipif(not capture.available(), reason="torch.export's training capture needs PyTorch 2.6")

LENGTHS = (24, 16, 32, 16, 24, 16)


def assert_same_bits(reference: List[torch.Tensor], other: List[torch.Tensor], what: str) -> None:
    """Equal tensors, NaN where the reference has NaN (an overflowed step's gradients)."""
    assert len(reference) == len(other), what
    for i, (a, b) in enumerate(zip(reference, other)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what}, record {i}"
        assert bool(((a == b) | (a.isnan() & b.isnan())).all()), f"{what}, record {i}"


def scaled_steps(model: torch.nn.Module, init_scale: float) -> List[torch.Tensor]:
    """Float16 autocast and a GradScaler that grows each step, two micro-batches a step, gradients
    unscaled and clipped: each loss, then each step's gradients, scale and parameters."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1)
    record: List[torch.Tensor] = []
    for i, length in enumerate(LENGTHS):
        torch.manual_seed(i)  # dropout
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(**hf_style.batch("causal_lm", length, seed=i)).loss
        scaler.scale(loss / 2).backward()
        record.append(loss.detach())
        if i % 2 == 1:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, 0.5)
            record += [p.grad.clone() for p in parameters]
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            record.append(torch.tensor(scaler.get_scale()))
            record += [p.detach().clone() for p in parameters]
    return record


@pytest.mark.skipif(not hasattr(torch, "amp") or not hasattr(torch.amp, "GradScaler"),
                    reason="a GradScaler on the CPU needs torch.amp.GradScaler")
@pytest.mark.parametrize("init_scale", [2.0 ** 8, 2.0 ** 40], ids=["in_range", "overflowing"])
def test_float16_with_a_grad_scaler_skips_the_steps_the_model_skips(init_scale):
    reference = scaled_steps(hf_style.make("causal_lm"), init_scale)
    assert_same_bits(reference, scaled_steps(hf_style.make("causal_lm"), init_scale), "the model twice")
    scales = [float(t) for t in reference if t.dim() == 0 and t.dtype == torch.float32 and t.item() >= 1]
    if init_scale > 2.0 ** 20:  # the scaler backed off: steps were skipped on gradients that overflowed
        assert any(torch.isinf(t).any() or torch.isnan(t).any() for t in reference)
        assert min(scales) < init_scale
    model = jitckpt.checkpoint(hf_style.make("causal_lm"), memory_limit="min", profile_repeats=1)
    assert_same_bits(reference, scaled_steps(model, init_scale), "through jitckpt")
    info = jitckpt.plan(model)
    assert info["num_stages"] >= hf_style.Config().num_layers
    assert info["predicted_peak"] <= info["memory_limit"] < info["unconstrained_peak"]


class SelfCheckpointed(torch.nn.Module):
    """A layer that checkpoints itself, as Hugging Face's layers do under gradient_checkpointing_enable()."""

    def __init__(self, layer: torch.nn.Module, reentrant: bool) -> None:
        super().__init__()
        self.layer = layer
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        # the layer's keyword arguments bound first, as Hugging Face does: the reentrant form takes none
        return torch.utils.checkpoint.checkpoint(functools.partial(self.layer, **kwargs), x,
                                                 use_reentrant=self.reentrant)


def self_checkpointed(reentrant: bool) -> torch.nn.Module:
    model = hf_style.make("causal_lm")
    for i, layer in enumerate(model.model.layers):
        model.model.layers[i] = SelfCheckpointed(layer, reentrant)
    return model


def adamw_steps(model: torch.nn.Module) -> List[torch.Tensor]:
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=1e-2)
    record: List[torch.Tensor] = []
    for i, length in enumerate(LENGTHS[:4]):
        torch.manual_seed(i)  # dropout, which torch.utils.checkpoint replays in its recomputation
        loss = model(**hf_style.batch("causal_lm", length, seed=i)).loss
        (loss / 2).backward()
        record.append(loss.detach())
        if i % 2 == 1:
            torch.nn.utils.clip_grad_norm_(parameters, 0.5)
            record += [p.grad.clone() for p in parameters]
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            record += [p.detach().clone() for p in parameters]
    return record


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_layers_that_checkpoint_themselves_train_bit_for_bit_with_a_stage_each(reentrant):
    reference = adamw_steps(hf_style.make("causal_lm"))
    assert_same_bits(reference, adamw_steps(self_checkpointed(reentrant)), "torch.utils.checkpoint in the model")
    assert_same_bits(reference, adamw_steps(self_checkpointed(reentrant)), "the self-checkpointed model twice")
    model = jitckpt.checkpoint(self_checkpointed(reentrant), memory_limit="min", profile_repeats=1)
    assert_same_bits(reference, adamw_steps(model), "through jitckpt")
    info = jitckpt.plan(model)
    assert info["num_stages"] >= hf_style.Config().num_layers, info["labels"]
    assert info["predicted_peak"] <= info["memory_limit"] < info["unconstrained_peak"]
