"""Plain nn.Modules through torch.export (PyTorch 2.6 on): models TorchScript cannot script, written
the Hugging Face way (test/models/hf_style.py), trained with AdamW, accumulation and clipping, in
float32 and bfloat16 autocast, over batches of varying length, fine-tuned with frozen layers and an
adapter. Each trains bit for bit like the eager model (itself trained twice first), keeps its
output type and the model's own parameters, and errors say what to do. test_eager_zoo.py takes
the model zoo's families."""
import copy
import dataclasses
import math
import random
import re
import warnings
from typing import Any, Dict, List, Optional

import pytest
import torch

import jitckpt
from jitckpt.export import capture, vmap

import families
import hf_style

pytestmark = pytest.mark.skipif(not capture.available(), reason="torch.export's training capture needs PyTorch 2.6")

LENGTHS = (24, 16, 32, 16)  # dynamic padding: each batch as long as its longest row


def adamw_steps(model: torch.nn.Module, batches: List[Dict[str, Any]], accumulate: int = 2,
                autocast: bool = False) -> List[Any]:
    """AdamW over the batches, `accumulate` micro-batches a step, gradients clipped; per micro-batch
    the output's loss and logits, per step every parameter and gradient (a record to compare)."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=1e-2)
    record: List[Any] = []
    for i, kwargs in enumerate(batches):
        torch.manual_seed(i)  # dropout
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            output = model(**kwargs)
        assert isinstance(output, hf_style.ModelOutput), type(output)
        (output.loss / accumulate).backward()
        record.append(("output", output.loss.detach().clone(), output.logits.detach().clone(),
                       output.hidden_states))
        if (i + 1) % accumulate == 0:
            torch.nn.utils.clip_grad_norm_(parameters, 0.5)
            record.append(("gradients", [p.grad.clone() for p in parameters]))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            record.append(("parameters", [p.detach().clone() for p in model.parameters()]))
    return record


def assert_same(reference: List[Any], other: List[Any], what: str) -> None:
    assert len(reference) == len(other), what
    for step, (a, b) in enumerate(zip(reference, other)):
        assert a[0] == b[0], what
        tensors_a = [t for t in a[1:] if isinstance(t, torch.Tensor)] + [t for x in a[1:] if isinstance(x, list) for t in x]
        tensors_b = [t for t in b[1:] if isinstance(t, torch.Tensor)] + [t for x in b[1:] if isinstance(x, list) for t in x]
        assert len(tensors_a) == len(tensors_b), f"{what}, record {step}"
        for i, (x, y) in enumerate(zip(tensors_a, tensors_b)):
            assert x.dtype == y.dtype and torch.equal(x, y), \
                f"{what}, record {step} ({a[0]}), tensor {i}: max difference {(x.double() - y.double()).abs().max()}"


def hf_batches(kind: str) -> List[Dict[str, Any]]:
    return [hf_style.batch(kind, length, seed=i) for i, length in enumerate(LENGTHS)]


@pytest.mark.parametrize("kind", ["causal_lm", "classifier", "llama"])
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_unscriptable_models_train_bit_for_bit(kind, autocast):
    with pytest.raises(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(hf_style.make(kind))  # the point: TorchScript cannot take these
    batches = hf_batches(kind)
    reference = adamw_steps(hf_style.make(kind), batches, autocast=autocast)
    assert_same(reference, adamw_steps(hf_style.make(kind), batches, autocast=autocast), f"{kind}: eager twice")
    model = hf_style.make(kind)
    rewritten = jitckpt.checkpoint(model, memory_limit=0.6, profile_repeats=1)
    assert isinstance(rewritten, jitckpt.CheckpointedModule) and rewritten.module is model
    assert list(rewritten.parameters()) == list(model.parameters())
    assert_same(reference, adamw_steps(rewritten, batches, autocast=autocast), f"{kind} through jitckpt")
    info = jitckpt.plan(rewritten)
    assert info["num_stages"] >= hf_style.Config().num_layers, info["labels"]
    assert info["predicted_peak"] <= info["memory_limit"] < info["unconstrained_peak"]
    # One capture serves every length (export made them dynamic); each length got its own plan.
    assert len({tuple(v["input_shapes"][0]) for v in info["variants"]}) == len(set(LENGTHS))


@pytest.mark.parametrize("kind", ["causal_lm", "classifier", "llama"])
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("length", [4, 32])
def test_measured_step_peak_within_the_limit(kind, autocast, length):
    """At the smallest limit, one step's peak above what was live before it, with the caller's
    token ids that the chain holds added back; the loss (taken outside, on the logits) may add what
    families.loss_held_bytes measures. At length 4 the parameter gradients outweigh the
    activations, the learned position embedding's among them, made after the chain's backward."""
    kwargs = {k: v for k, v in hf_style.batch(kind, length).items() if k != "labels"}
    model = jitckpt.checkpoint(hf_style.make(kind), memory_limit="min", profile_repeats=1)
    peak, allowed, info = families.eager_step_peak(model, kwargs, lambda logits: logits.float().pow(2).mean(), autocast)
    assert peak <= allowed, f"{kind}: measured peak {peak} bytes, allowed {allowed}, limit {info['memory_limit']}"


class SizeArithmetic(torch.nn.Module):
    """Layers between which forward computes with the sequence length, as models do."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        for layer in self.layers:
            x = layer(x)
            if self.kind == "arange":
                x = x + torch.arange(t, device=x.device)[None, :, None].to(x.dtype)
            elif self.kind == "causal_mask":
                x = x + torch.full((t, t), float("-inf"), device=x.device).triu(1).softmax(-1) @ x
            elif self.kind == "pad_to_4":
                x = torch.nn.functional.pad(x, (0, 0, 0, (-t) % 4))[:, :t]
            elif self.kind == "reshape":
                x = x.reshape(b, t // 2, 2 * d).reshape(b, t, d)
            elif self.kind == "sqrt_length":  # export specializes the length: a capture per length
                x = x / math.sqrt(t)
            elif self.kind == "float_length":  # a float of a size, dynamic in the built graph
                x = x * (t ** -0.5)
        return x


@pytest.mark.parametrize("kind", ["arange", "causal_mask", "pad_to_4", "reshape", "sqrt_length", "float_length"])
def test_size_arithmetic_between_layers(kind):
    torch.manual_seed(0)
    reference = SizeArithmetic(kind)
    torch.manual_seed(0)
    model = jitckpt.checkpoint(SizeArithmetic(kind), memory_limit="min", profile_repeats=1)
    for t in (8, 12, 8):
        x = torch.randn(2, t, 16)
        expected, got = reference(x), model(x)
        expected.sum().backward()
        got.sum().backward()
        assert torch.equal(expected, got), (kind, t)
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(reference.parameters(), model.parameters())), (kind, t)
    assert model.front_end == "export" and len(model._captures) == (2 if kind == "sqrt_length" else 1), kind


class OneLongSomewhere(torch.nn.Module):
    """A strided convolution one long at length 4, a batch norm over it, and a channel shuffle:
    export keeps that 1 as a constant in the graph while its ranges take every length from 3 on."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 4, 3, stride=2)
        self.norm = torch.nn.BatchNorm1d(4)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.conv(x.transpose(1, 2)))
        h = h.view(h.size(0), 2, 2, -1).transpose(1, 2).reshape(h.size())
        return self.head(h.mean(2))


def test_a_size_export_keeps_inside_the_graph_makes_a_capture_of_its_own():
    torch.manual_seed(0)
    reference = OneLongSomewhere()
    model = copy.deepcopy(reference)
    checkpointed = jitckpt.checkpoint(model, memory_limit="min", profile_repeats=1)
    for t in (16, 4, 12, 4, 20):
        x = torch.randn(2, t, 4, generator=torch.Generator().manual_seed(t))
        reference(x).sum().backward()
        checkpointed(x).sum().backward()
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(reference.parameters(), model.parameters())), t
        assert all(torch.equal(a, b) for a, b in zip(reference.buffers(), model.buffers())), t
    # length 4 apart, with its own sizes; every other length on the first capture
    assert [c.sizes for c, _ in checkpointed._captures][1:] == [[(2, 4, 4)]]


class WindowedImages(torch.nn.Module):
    """Attention within windows of 4 x 4 pixels, the window arithmetic of Swin and MaxVit."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))
        self.head = torch.nn.Linear(16, 5)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stem(images)
        b, c, h, w = x.shape
        for block in self.blocks:
            windows = x.view(b, c, h // 4, 4, w // 4, 4).permute(0, 2, 4, 3, 5, 1).reshape(-1, 16, c)
            mixed = torch.softmax(windows @ windows.transpose(1, 2) / 4, dim=-1) @ block(windows)
            x = x + mixed.view(b, h // 4, w // 4, 4, 4, c).permute(0, 5, 1, 3, 2, 4).reshape(b, c, h, w)
        return self.head(x.mean((2, 3)))


def test_an_images_batch_is_captured_dynamic_and_its_height_and_width_static():
    """Export's reasoning over window arithmetic on a dynamic height and width took minutes
    (torchvision's MaxVit: 400 s on this machine's first step): an image's batch stays dynamic, and
    a new size is captured again. Every step bit for bit like the model."""
    images = [torch.randn(n, 3, h, 16, generator=torch.Generator().manual_seed(n + h)) for n, h in
              ((4, 16), (2, 16), (4, 24))]

    def steps(model: torch.nn.Module) -> List[torch.Tensor]:
        record = []
        for x in images:
            model.zero_grad(set_to_none=True)
            output = model(x)
            output.pow(2).mean().backward()
            record += [output.detach().clone()] + [p.grad.clone() for p in model.parameters()]
        return record

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return WindowedImages()
    reference = steps(make())
    assert all(torch.equal(a, b) for a, b in zip(reference, steps(make()))), "the model itself, twice"
    model = jitckpt.checkpoint(make(), memory_limit="min", profile_repeats=1)
    record = steps(model)
    assert all(torch.equal(a, b) for a, b in zip(reference, record))
    sizes = [captured.sizes[0] for captured, _ in reversed(model._captures)]
    assert len(sizes) == 2 and [s[1:] for s in sizes] == [(3, 16, 16), (3, 24, 16)], sizes
    assert not any(isinstance(s[0], int) for s in sizes), sizes  # batches of 4 and 2 share one


def test_the_capture_needs_no_torchscript_compiler(monkeypatch):
    """The captured graph is built as IR from export's ATen calls: torch.jit.script, which PyTorch
    deprecates, is never called (a model with size arithmetic, dropout and a dataclass output)."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the export front end called TorchScript's compiler")

    batches = hf_batches("causal_lm")[:2]
    reference = adamw_steps(hf_style.make("causal_lm"), batches)
    monkeypatch.setattr(torch.jit, "script", refuse)
    model = jitckpt.checkpoint(hf_style.make("causal_lm"), memory_limit=0.5, profile_repeats=1,
                               front_end="export")
    assert_same(reference, adamw_steps(model, batches), "causal_lm without the TorchScript compiler")
    assert model.front_end == "export"


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryBlocks(torch.nn.Module):
    """Rotary embeddings as Hugging Face's decoders compute them (under @torch.no_grad(), autocast
    off inside, from a buffer and the positions), and a no_grad block per layer that reads
    activations that require grad: export records both as nested graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16)), persistent=False)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(4))

    @torch.no_grad()
    def rotary(self, x: torch.Tensor, positions: torch.Tensor) -> Any:
        inv_freq = self.inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
        with torch.autocast(device_type="cpu", enabled=False):
            freqs = (inv_freq @ positions[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
        cos, sin = self.rotary(x, positions)
        for layer in self.layers:
            h = layer(x)
            with torch.no_grad():
                scale = h.abs().amax(-1, keepdim=True) + 1
            x = x + torch.tanh(h * cos + rotate_half(h) * sin) / scale
        return x


def test_no_grad_and_autocast_blocks_in_forward_train_bit_for_bit():
    """Blocks run as the model runs them: what a no_grad block makes gets no gradient; an autocast
    block that leaves autocast as the call has it changes nothing, and one that switches it (off,
    under the caller's bfloat16 autocast) runs its ops under the state it sets."""
    torch.manual_seed(0)
    reference = RotaryBlocks()
    model = jitckpt.checkpoint(copy.deepcopy(reference), memory_limit="min", profile_repeats=1, front_end="export")
    for t, autocast in ((8, False), (12, False), (8, True), (12, True), (8, False)):
        x = torch.randn(2, t, 16)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            expected, got = reference(x), model(x)
        expected.float().square().sum().backward()
        got.float().square().sum().backward()
        assert torch.equal(expected, got), (t, autocast)
        for p, q in zip(reference.parameters(), model.parameters()):
            assert torch.equal(p.grad, q.grad), (t, autocast)
        assert jitckpt.plan(model)["num_stages"] >= 4
    assert model.front_end == "export" and len(model._captures) == 2  # one per autocast state


class DrawsInAnAutocastBlock(torch.nn.Module):
    """Dropout, and a Function that draws its own mask, in float32 blocks with autocast off."""

    def __init__(self, in_place: bool = False) -> None:
        super().__init__()
        self.in_place = in_place
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = torch.relu(layer(x))
            with torch.autocast("cpu", enabled=False):
                if self.in_place:
                    x = x.float().mul_(2)
                elif i % 2 == 0:
                    x = torch.nn.functional.dropout(x.float(), 0.3)
                else:
                    x = DropScaled.apply(x.float(), 0.2, 0.5)[0]
        return x


def test_random_draws_inside_an_autocast_block_are_replayed_and_in_place_ops_refused():
    """A block that switches autocast is one op, which the stage holding it replays the generator
    state for when it recomputes, as for any random op; an op writing in place inside is refused."""
    x = torch.randn(512, 16)

    def loss(module: torch.nn.Module) -> torch.Tensor:
        torch.manual_seed(1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return module(x).pow(2).sum()

    assert "Fn(" in jitckpt.plan(same_gradients_as_the_model(DrawsInAnAutocastBlock, loss))["schedule"]
    module = jitckpt.checkpoint(DrawsInAnAutocastBlock(in_place=True), memory_limit="min", front_end="export")
    with pytest.raises(capture.CaptureError, match=r"mul_.*\(in place\) inside a torch.autocast block that switches "
                                                   r"autocast .*x = x.float\(\).mul_\(2\).*move it out of the block"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            module(x)


class AdditiveMaskAttention(torch.nn.Module):
    """Attention over padding with an additive float mask built from a tensor literal, as Hugging
    Face builds its masks: export records torch.tensor(0.0) as a copy detached in place."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(16, 48) for _ in range(3))
        self.out = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        mask = torch.where(keep[:, None, None, :], torch.tensor(0.0), torch.finfo(x.dtype).min)
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = qkv(x).view(x.shape[0], x.shape[1], 3, 2, 8).permute(2, 0, 3, 1, 4)
            attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + out(attended.transpose(1, 2).reshape(x.shape))
        return x


def test_a_mask_made_from_a_tensor_literal_needs_no_grad_across_cuts():
    """A float mask that requires grad makes the CPU attention take its math kernel instead of the
    model's flash kernel (other bits): the mask crossing a cut must not be given a gradient."""
    x, keep = torch.randn(4, 24, 16), torch.arange(24)[None, :] < torch.tensor([[24], [20], [12], [17]])
    module = same_gradients_as_the_model(AdditiveMaskAttention, lambda module: module(x, keep).pow(2).sum())
    assert jitckpt.plan(module)["num_stages"] >= 4


class VmapMaskAttention(AdditiveMaskAttention):
    """A boolean mask built with torch.vmap over the batch from which tokens each row keeps, as
    Hugging Face builds Falcon's: export records vmap's markers around the function's ops."""

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        def causal_and_kept(row: torch.Tensor) -> torch.Tensor:
            position = torch.arange(row.shape[0])
            return (position[:, None] >= position[None, :]) & row[None, :]

        mask = torch.vmap(causal_and_kept)(keep)[:, None]
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = qkv(x).view(x.shape[0], x.shape[1], 3, 2, 8).permute(2, 0, 3, 1, 4)
            attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + out(attended.transpose(1, 2).reshape(x.shape))
        return x


needs_vmap_export = pytest.mark.skipif(not capture.available() or not vmap.LOWERS_VMAP,
                                       reason="jitckpt runs torch.vmap from PyTorch 2.14 on")


@needs_vmap_export
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_a_mask_built_with_vmap_runs_as_its_aten_ops(autocast):
    """vmap's region is traced to the ATen ops its batching runs, at each length the batches have."""
    def loss(module: torch.nn.Module) -> torch.Tensor:
        total = torch.zeros(())
        for length in (24, 16):
            x = torch.randn(4, length, 16, generator=torch.Generator().manual_seed(length))
            keep = torch.arange(length)[None, :] < torch.tensor([[length], [length - 4], [12], [9]])
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                total = total + module(x, keep).float().pow(2).sum()
        return total

    module = same_gradients_as_the_model(VmapMaskAttention, loss)
    assert jitckpt.plan(module)["num_stages"] >= 4


class VmapOverActivations(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.vmap(lambda row: torch.tanh(layer(row)))(x)
        return x


@needs_vmap_export
def test_vmap_over_what_may_require_grad_is_refused_saying_what_to_do():
    model = jitckpt.checkpoint(VmapOverActivations(), memory_limit="min", front_end="export")
    with pytest.raises(capture.CaptureError, match=r"torch.vmap on a tensor that may require grad .*"
                                                   r"test_eager_modules.py.*apply the function to the batch"):
        model(torch.randn(4, 8))


class NumberFirst(torch.nn.Module):
    """torch.add with a number first, as Phimoe's router writes it: export records the number
    where the schema takes a tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            h = layer(x)
            weight = torch.add(0.3333, h > 0, alpha=0.6667).type_as(h)  # 1 -> 1.0, 0 -> 1/3
            x = torch.add(0.5, h * weight)  # in h's dtype under autocast, as a number keeps it
        return x


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_a_number_where_an_op_takes_a_tensor_promotes_as_a_number(autocast):
    x = torch.randn(64, 16)

    def loss(module: torch.nn.Module) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = module(x)
        assert out.dtype == (torch.bfloat16 if autocast else torch.float32)
        return out.float().pow(2).sum()

    module = same_gradients_as_the_model(NumberFirst, loss)
    assert module.front_end == "export" and jitckpt.plan(module)["num_stages"] >= 3


class DrawsOnTheHost(torch.nn.Module):
    """Masks features drawn with NumPy or Python's random, as SpecAugment does in Hugging Face's
    speech models."""

    def __init__(self, generator: str) -> None:
        super().__init__()
        self.generator = generator
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        if self.generator == "numpy":
            import numpy

            keep = torch.tensor(numpy.random.rand(16) > 0.5)
        else:
            keep = torch.tensor([random.random() > 0.5 for _ in range(16)])
        return x * keep


@pytest.mark.parametrize("generator", ["numpy", "python"])
def test_draws_from_python_or_numpy_are_refused_not_frozen(generator):
    """Export would record the draw as a constant: every step would mask the same features."""
    if generator == "numpy":
        pytest.importorskip("numpy")
    model = DrawsOnTheHost(generator)
    before = [p.detach().clone() for p in model.parameters()]
    checkpointed = jitckpt.checkpoint(model, memory_limit="min", front_end="export")
    name = "numpy.random.rand" if generator == "numpy" else "random.random"
    with pytest.raises(capture.CaptureError, match=rf"draws random numbers with Python or NumPy \({re.escape(name)} at "
                                                   r".*test_eager_modules.py:\d+.*export records as constants"):
        checkpointed(torch.randn(8, 16)).sum().backward()
    assert all(torch.equal(a, p) and p.grad is None for a, p in zip(before, model.parameters()))


@dataclasses.dataclass
class UnregisteredOutput:  # a dataclass nobody registered with pytree, as users write them
    logits: torch.Tensor
    steps: int = 3
    extra: Optional[torch.Tensor] = None


class ReturnsUnregistered(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: torch.Tensor) -> UnregisteredOutput:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return UnregisteredOutput(logits=x)


def test_an_unregistered_output_dataclass_is_registered_for_export():
    torch.manual_seed(0)
    reference = ReturnsUnregistered()
    torch.manual_seed(0)
    model = jitckpt.checkpoint(ReturnsUnregistered(), memory_limit="min", profile_repeats=1, front_end="export")
    x = torch.randn(4, 8)
    expected, got = reference(x), model(x)
    assert type(got) is UnregisteredOutput and got.steps == 3 and got.extra is None
    expected.logits.sum().backward()
    got.logits.sum().backward()
    assert torch.equal(expected.logits, got.logits)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(reference.parameters(), model.parameters()))


def test_output_types_and_keyword_arguments_are_the_models():
    model = hf_style.make("causal_lm")
    rewritten = jitckpt.checkpoint(hf_style.make("causal_lm"), memory_limit=0.6, profile_repeats=1)
    kwargs = hf_style.batch("causal_lm", 16)
    for call in ({"output_hidden_states": True}, {}, {"labels": None}):
        torch.manual_seed(0)
        expected = model(**{**kwargs, **call})
        torch.manual_seed(0)
        got = rewritten(**{**kwargs, **call})
        assert type(got) is type(expected)
        for field in ("loss", "logits", "hidden_states"):
            a, b = getattr(expected, field), getattr(got, field)
            assert (a is None) == (b is None), field
            if a is not None:
                assert all(torch.equal(x, y) for x, y in zip(
                    a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,))), field


def test_frozen_layers_and_an_adapter_train_bit_for_bit():
    """Fine-tuning: the backbone frozen but its last layer, and a low-rank adapter on the head."""

    class Adapted(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base = hf_style.make("classifier")
            for p in self.base.model.parameters():
                p.requires_grad_(False)
            for p in self.base.model.layers[-1].parameters():
                p.requires_grad_(True)
            self.down = torch.nn.Linear(32, 4, bias=False)
            self.up = torch.nn.Linear(4, 3, bias=False)

        def forward(self, **kwargs: Any) -> hf_style.ModelOutput:
            labels = kwargs.pop("labels")
            x, _ = self.base.model(kwargs["input_ids"], attention_mask=kwargs["attention_mask"])
            logits = self.base.classifier(x.mean(1)) + self.up(self.down(x.mean(1)))
            return hf_style.ModelOutput(loss=torch.nn.functional.cross_entropy(logits, labels), logits=logits)

    batches = hf_batches("classifier")
    reference = adamw_steps(Adapted(), batches)
    assert_same(reference, adamw_steps(Adapted(), batches), "adapter: eager twice")
    assert_same(reference, adamw_steps(jitckpt.checkpoint(Adapted(), memory_limit="min", profile_repeats=1),
                                       batches), "adapter through jitckpt")


def parametrized_conv_net() -> torch.nn.Module:
    """Convolutions under weight_norm, as in vocoders and wav2vec2's positional convolution."""
    from torch.nn.utils.parametrizations import weight_norm
    layers: List[torch.nn.Module] = []
    for i in range(6):
        layers += [weight_norm(torch.nn.Conv2d(3 if i == 0 else 16, 16, 3, padding=1)),
                   torch.nn.GroupNorm(4, 16), torch.nn.SiLU()]
    return torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 4))


def parametrized_mlp(parametrization: str) -> torch.nn.Module:
    """Hidden layers under spectral_norm (whose power iteration updates two buffers in place at
    every training call) or orthogonal."""
    from torch.nn.utils import parametrizations
    wrap = getattr(parametrizations, parametrization)
    layers: List[torch.nn.Module] = [torch.nn.Linear(8, 64)]
    for _ in range(6):
        layers += [wrap(torch.nn.Linear(64, 64)), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(64, 4))


@pytest.mark.parametrize("kind", ["weight_norm", "spectral_norm", "orthogonal"])
def test_parametrized_weights_train_bit_for_bit(kind):
    """torch.nn.utils.parametrize computes a weight from its parts at each call (inside forward, so
    inside the capture); recomputed stages must neither compute it differently nor run spectral
    norm's in-place buffer updates twice. Losses, parameters and buffers after AdamW steps."""
    shape = (32, 3, 16, 16) if kind == "weight_norm" else (256, 8)

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return parametrized_conv_net() if kind == "weight_norm" else parametrized_mlp(kind)

    def steps(model: torch.nn.Module) -> List[torch.Tensor]:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        record = []
        for i in range(3):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(i))
            loss = model(x).square().mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            record.append(loss.detach().clone())
        return record + [t.detach().clone() for t in model.state_dict().values()]

    reference = steps(build())
    families.assert_same_records(reference, steps(build()), f"{kind}: eager twice")
    model = build()
    checkpointed = jitckpt.checkpoint(model, memory_limit="min", profile_repeats=1)
    if not exports(build(), torch.randn(*shape)):  # 2.6's export stops at spectral norm's in-place power iteration
        before = [t.clone() for t in model.state_dict().values()]
        with pytest.raises(capture.CaptureError, match="could not capture Sequential with torch.export"):
            steps(checkpointed)  # nor can TorchScript script it, and scripting reads the weight
        families.assert_same_records(before, list(model.state_dict().values()), f"{kind}: a failed capture")
        return
    families.assert_same_records(reference, steps(checkpointed), f"{kind} through jitckpt")
    assert len(jitckpt.plan(checkpointed)["stage_groups"]) > 1, "nothing was recomputed"
    assert torch.nn.utils.parametrize.is_parametrized(checkpointed.module[0 if kind == "weight_norm" else 1])


def exports(model: torch.nn.Module, x: torch.Tensor) -> bool:
    try:
        torch.export.export(model, (x,), strict=False)
        return True
    except Exception:
        return False


def test_a_model_moved_to_another_dtype_plans_again_without_a_warning():
    """model.double() after steps in float32: its buffers are new tensors, in float64, and the
    next call captures and plans again, as for any new dtype, bit for bit and without the warning
    meant for tensors replaced by others."""

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        layers: List[torch.nn.Module] = []
        for i in range(4):
            layers += [torch.nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.Linear(8 * 16 * 16, 4))

    def steps(model: torch.nn.Module) -> List[torch.Tensor]:
        record = []
        for dtype in (torch.float32, torch.float64):
            model.to(dtype)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
            for i in range(2):
                x = torch.randn(16, 3, 16, 16, generator=torch.Generator().manual_seed(i), dtype=dtype)
                loss = model(x).square().mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                record.append(loss.detach().clone())
        return record + [t.detach().clone() for t in model.state_dict().values()]

    reference = steps(build())
    families.assert_same_records(reference, steps(build()), "eager twice")
    checkpointed = jitckpt.checkpoint(build(), memory_limit="min", profile_repeats=1)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*another tensor")
        families.assert_same_records(reference, steps(checkpointed), "through jitckpt")
    assert [dtype for dtype in jitckpt.plan(checkpointed)["input_types"] if "Double" in str(dtype)]


def test_example_inputs_plan_now_and_no_grad_calls_run_the_model():
    family = families.FAMILIES["llama"]("test")
    model = jitckpt.checkpoint(family.eager(0), family.inputs, memory_limit="min", profile_repeats=1)
    assert "schedule" in jitckpt.plan(model)
    assert jitckpt.partition(family.eager(0), family.inputs)["labels"] == jitckpt.plan(model)["labels"]
    unplanned = jitckpt.checkpoint(family.eager(0), memory_limit="min")
    with pytest.raises(ValueError, match="not been captured yet"):
        jitckpt.plan(unplanned)
    with torch.no_grad():
        assert torch.equal(unplanned(*family.inputs), family.eager(0)(*family.inputs))
    assert unplanned.rewritten is None, "a no-grad call captured"
    assert jitckpt.strip(unplanned) is unplanned.module


def test_state_dict_is_the_models_and_loads_into_a_captured_module():
    kwargs = hf_style.batch("causal_lm", 16)
    trained = jitckpt.checkpoint(hf_style.make("causal_lm", seed=0), memory_limit=0.6, profile_repeats=1)
    trained(**kwargs).loss.backward()
    with torch.no_grad():
        for p in trained.parameters():
            p.sub_(0.1 * p.grad)
    state = trained.state_dict()
    assert list(state) == ["module." + name for name in trained.module.state_dict()]
    other = jitckpt.checkpoint(hf_style.make("causal_lm", seed=1), memory_limit=0.6, profile_repeats=1)
    other(**kwargs).loss.backward()  # captured and planned before the load
    other.load_state_dict(state)
    for seed in range(2):
        torch.manual_seed(seed)
        expected = trained(**kwargs)
        torch.manual_seed(seed)
        assert torch.equal(other(**kwargs).logits, expected.logits), "the capture kept the old weights"


def test_an_eager_modules_profile_is_reused_at_other_limits():
    family = families.FAMILIES["llama"]("test")
    profiled = jitckpt.checkpoint(family.eager(0), family.inputs, memory_limit=None, profile_repeats=1)
    model = jitckpt.checkpoint(family.eager(0), family.inputs, memory_limit="min", reuse_profile_of=profiled)
    assert jitckpt.plan(model)["costs"] == jitckpt.plan(profiled)["costs"]  # measured again, the times differ
    assert jitckpt.plan(model)["memory_limit"] < jitckpt.plan(profiled)["memory_limit"]
    with pytest.raises(ValueError, match="not of a scripted one"):
        jitckpt.checkpoint(family.eager(0), family.inputs, reuse_profile_of=torch.jit.script(family.eager(0)))
    with pytest.raises(ValueError, match="needs the example inputs"):
        jitckpt.checkpoint(family.eager(0), reuse_profile_of=profiled)


def test_eval_mode_captures_again():
    family = families.FAMILIES["gpt_mask_input"]("test")
    reference, model = family.eager(0), jitckpt.checkpoint(family.eager(0), memory_limit=0.7, profile_repeats=1)
    for mode in ("eval", "train", "eval"):
        getattr(reference, mode)(), getattr(model, mode)()
        torch.manual_seed(0)
        expected = reference(*family.inputs)
        torch.manual_seed(0)
        assert torch.equal(model(*family.inputs), expected), mode
    assert len(model._captures) == 2  # a capture per training flag, the second eval call reused


class DataDependent(torch.nn.Module):
    """Branches on data: export cannot capture it, TorchScript can script it."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
            if bool(x.sum() > 0):  # a branch on data: export cannot capture it
                x = x * 2
        return x


def test_models_export_cannot_capture_fall_back_to_torchscript_or_say_why(capfd):
    x = torch.randn(4, 8)
    with pytest.raises(capture.CaptureError, match=r"could not capture DataDependent with torch.export .*"
                                                   r"data-dependent.*test_eager_modules.py"):
        jitckpt.checkpoint(DataDependent(), memory_limit="min", front_end="export")(x)
    assert "def forward(" not in capfd.readouterr().err  # export's partial graph (2.14), at each try
    torch.manual_seed(0)
    expected = DataDependent()(x)
    torch.manual_seed(0)
    model = jitckpt.checkpoint(DataDependent(), memory_limit="min", profile_repeats=1)
    with pytest.warns(UserWarning, match="trains through TorchScript instead"):
        assert torch.equal(model(x), expected)
    assert isinstance(model.rewritten, torch.jit.ScriptModule) and model.front_end == "script"

    class Neither(DataDependent):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return {1: x}[len(x.shape) ** 0.5] if bool(x.sum() > 0) else x  # nor scriptable

    with pytest.raises(capture.CaptureError, match="TorchScript could not take it either"):
        jitckpt.checkpoint(Neither(), memory_limit="min")(x)

    with pytest.raises(ValueError, match='front_end must be "auto", "export" or "script"'):
        jitckpt.checkpoint(DataDependent(), front_end="trace")
    with pytest.raises(TypeError, match="takes the eager nn.Module"):
        jitckpt.checkpoint(torch.jit.script(DataDependent()), front_end="export")


class LossOfLabeledRows(torch.nn.Module):
    """A classifier that takes in forward the loss of the rows that have a label, as DeBERTa does:
    a branch on how many there are."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        labeled = (labels >= 0).nonzero()[:, 0]
        if labeled.size(0) > 0:
            return torch.nn.functional.cross_entropy(x[labeled], labels[labeled])
        return x.sum() * 0


def test_a_branch_on_data_names_its_line_and_what_to_do():
    x, labels = torch.randn(4, 8), torch.tensor([1, -100, 3, 0])
    with pytest.raises(capture.CaptureError, match=r"data-dependent.*test_eager_modules.py\", line \d+: "
                                                   r"if labeled.size\(0\) > 0.*move that code out of forward.*"
                                                   r"call the model without them"):
        jitckpt.checkpoint(LossOfLabeledRows(), memory_limit="min", front_end="export")(x, labels)


class LayerDropStack(torch.nn.Module):
    """Layers skipped where a draw falls below LayerDrop's probability, as 44 of Hugging Face's
    families write it (OPT, BART, Whisper, ...): at 0 none is, but each draw advances the generator
    that the dropout after it draws from."""

    def __init__(self, layerdrop: float) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(4))
        self.layerdrop = layerdrop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:
                    continue
            x = torch.nn.functional.dropout(torch.relu(layer(x)), 0.2, self.training)
        return x


def test_layer_drop_at_zero_is_captured_and_draws_as_the_model_does():
    def steps(model: torch.nn.Module) -> List[torch.Tensor]:
        record = []
        for i, t in enumerate((8, 12, 8)):
            torch.manual_seed(i)
            y = model(torch.randn(2, t, 16))
            y.pow(2).sum().backward()
            record += [y.detach().clone()] + [p.grad.clone() for p in model.parameters()]
        return record

    reference = []
    for _ in range(2):
        torch.manual_seed(0)
        reference.append(steps(LayerDropStack(0.0)))
    torch.manual_seed(0)
    model = jitckpt.checkpoint(LayerDropStack(0.0), memory_limit="min", profile_repeats=1, front_end="export")
    for record in (reference[1], steps(model)):
        assert all(torch.equal(a, b) for a, b in zip(reference[0], record))
    assert model.front_end == "export" and model.layerdrop == 0.0 and type(model.module.layerdrop) is float
    with pytest.raises(capture.CaptureError, match=r"LayerDrop \(layerdrop\) skips layers at random.*set it to 0"):
        jitckpt.checkpoint(LayerDropStack(0.1), memory_limit="min", front_end="export")(torch.randn(2, 8, 16))


def same_gradients_as_the_model(make: Any, loss: Any) -> Any:
    """`loss(module)` backward on the model `make` builds (under seed 0), twice as it is, then
    checkpointed at "min" through export: asserts the three give the same gradients, bit for bit;
    returns the checkpointed module."""
    gradients = []
    for rewritten in (False, False, True):
        torch.manual_seed(0)
        module = make()
        if rewritten:
            module = jitckpt.checkpoint(module, memory_limit="min", profile_repeats=1, front_end="export")
        loss(module).backward()
        gradients.append([p.grad for p in module.parameters()])
    for other in gradients[1:]:
        assert all(torch.equal(a, b) for a, b in zip(gradients[0], other))
    return module


class ReverseGradient(torch.autograd.Function):
    """A gradient reversal layer (domain adaptation): the identity forward, the gradient negated."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return -grad


class RoundStraightThrough(torch.autograd.Function):
    """A straight-through estimator (quantization-aware training): rounds, passes the gradient on."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


class DropScaled(torch.autograd.Function):
    """Masks at random, returns the mask's count too, and scales its gradient by an argument."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float, scale: float) -> Any:
        mask = (torch.rand_like(x) > p).to(x.dtype)
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return x * mask, mask.sum()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _: torch.Tensor) -> Any:
        (mask,) = ctx.saved_tensors
        return grad * mask * ctx.scale, None, None


class ScaleByRows(torch.autograd.Function):
    """Takes a size of its input as an argument (a size export would make symbolic)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, rows: int) -> torch.Tensor:
        ctx.rows = rows
        return x / rows

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return grad * (2.0 / ctx.rows), None


# torch.amp's Function decorators (PyTorch 2.4 on; 1.13 skips this file but imports it).
custom_fwd = getattr(torch.amp, "custom_fwd", lambda **_: lambda f: f)
custom_bwd = getattr(torch.amp, "custom_bwd", lambda **_: lambda f: f)


class LinearFunction(torch.autograd.Function):
    """A linear layer's own forward and backward, run in float32 under autocast (as custom kernels
    are), its weights among its arguments."""

    @staticmethod
    @custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return x @ weight.t() + bias

    @staticmethod
    @custom_bwd(device_type="cpu")
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.t() @ x, grad.sum(0)


class FunctionLinear(torch.nn.Linear):
    def __init__(self) -> None:
        super().__init__(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LinearFunction.apply(x, self.weight, self.bias)


FUNCTIONS = {
    "reverse": lambda x: ReverseGradient.apply(x),
    "straight_through": lambda x: RoundStraightThrough.apply(x * 8) / 8,  # to eighths
    "random_two_outputs": lambda x: DropScaled.apply(x, 0.3, 0.5)[0],
    "size_argument": lambda x: ScaleByRows.apply(x, x.shape[0]),
    "weights_and_custom_fwd": FunctionLinear,  # a module class: one made for each model
}


@torch.jit.ignore
def reverse_gradient(x: torch.Tensor) -> torch.Tensor:
    return ReverseGradient.apply(x)


class AppliesFunction(torch.nn.Module):
    """Layers with a torch.autograd.Function applied after every second one."""

    def __init__(self, function: Any = None) -> None:
        super().__init__()
        self.function = function() if isinstance(function, type) else function
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(6))

    def forward(self, x: torch.Tensor) -> Any:
        for i, layer in enumerate(self.layers):
            x = torch.relu(layer(x))
            if i % 2 == 1:
                x = self.function(x)
        return hf_style.ModelOutput(logits=x, loss=x.float().pow(2).mean())


class CallsIgnoredFunction(AppliesFunction):
    """The gradient reversal applied from a function that TorchScript ignores."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = torch.relu(layer(x))
            if i % 2 == 1:
                x = reverse_gradient(x)
        return x


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_function_trains_with_its_own_backward(function, autocast):
    """Export records a Function's forward ops, whose gradients would replace its own (a reversal's
    sign lost, a straight-through gradient made zero): each trains with its own backward, bit for
    bit, its random draws replayed where its stage is recomputed, over batches of two sizes."""
    batches = [{"x": torch.randn(rows, 16, generator=torch.Generator().manual_seed(rows))} for rows in (256, 192)] * 2

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return AppliesFunction(FUNCTIONS[function])

    reference = adamw_steps(make(), batches, autocast=autocast)
    assert_same(reference, adamw_steps(make(), batches, autocast=autocast), "the model itself, twice")
    model = jitckpt.checkpoint(make(), memory_limit="min", profile_repeats=1, front_end="export")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same(reference, adamw_steps(model, batches, autocast=autocast), f"{function} through jitckpt")
    # A Function's forward runs with grad off, where autocast caches no cast of its weights.
    assert not [w for w in caught if "both cast" in str(w.message)], [str(w.message) for w in caught]
    info = jitckpt.plan(model)
    assert model.front_end == "export" and info["num_stages"] >= 6 and "Fn(" in info["schedule"], info["schedule"]


class CountsItsCalls(torch.autograd.Function):
    """Returns how often it ran beside its tensor: a result that the capture cannot hold."""

    calls = 0

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> Any:
        CountsItsCalls.calls += 1
        return x * 2, CountsItsCalls.calls

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _: Any) -> torch.Tensor:
        return grad * 2


def test_a_function_whose_other_results_change_is_an_error_that_loses_nothing():
    model = AppliesFunction(lambda x: CountsItsCalls.apply(x)[0])
    before = [p.detach().clone() for p in model.parameters()]
    checkpointed = jitckpt.checkpoint(model, memory_limit="min", profile_repeats=1, front_end="export")
    with pytest.raises((capture.CaptureError, RuntimeError), match=r"CountsItsCalls returned values of another kind "
                                                                   r"than when jitckpt captured the model"):
        checkpointed(torch.randn(64, 16)).loss.backward()
    assert all(torch.equal(a, p) and p.grad is None for a, p in zip(before, model.parameters()))


def test_a_function_keeps_the_step_peak_within_the_limit():
    model = jitckpt.checkpoint(AppliesFunction(FUNCTIONS["random_two_outputs"]), memory_limit="min",
                               profile_repeats=1, front_end="export")
    peak, allowed, info = families.eager_step_peak(model, {"x": torch.randn(512, 16)},
                                                   lambda logits: logits.pow(2).mean())
    assert peak <= allowed, (peak, allowed, info["schedule"])


def test_a_function_called_through_torchscript_keeps_its_backward():
    x = torch.randn(512, 16)
    torch.manual_seed(0)
    reference = CallsIgnoredFunction()
    reference(x).pow(2).sum().backward()
    torch.manual_seed(0)
    model = jitckpt.checkpoint(torch.jit.script(CallsIgnoredFunction()), memory_limit="min", profile_repeats=1)
    model(x).pow(2).sum().backward()
    assert "Fn(" in jitckpt.plan(model)["schedule"]
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(reference.parameters(), model.parameters()))


def test_a_limit_no_schedule_fits_says_so_in_jitckpts_words():
    """Planned at the first training call, inside the rewritten module: the error is jitckpt's, not
    TorchScript's interpreter's report around it, and the model loses nothing."""
    model = hf_style.make("causal_lm")
    before = [p.detach().clone() for p in model.parameters()]
    checkpointed = jitckpt.checkpoint(model, memory_limit=1024, profile_repeats=1)
    with pytest.raises(RuntimeError) as raised:
        checkpointed(**hf_batches("causal_lm")[0]).loss.backward()
    message = str(raised.value)
    assert message.startswith("jitckpt: ") and "TorchScript" not in message, message
    assert "the smallest limit that works is" in message, message
    assert all(torch.equal(a, b) and b.grad is None for a, b in zip(before, model.parameters()))


def test_a_batch_of_one_keeps_the_bytes_a_fraction_meant_at_a_larger_batch():
    """Export specializes a size of one, so a batch of one is captured apart: it keeps to the bytes
    the fraction meant for the larger batch, where the fraction of its own peak fits no schedule,
    instead of stopping training."""
    family = families.FAMILIES["llama"]("test")
    vocab = family.eager(0).embed.weight.shape[0]
    batches = [torch.randint(0, vocab, (b, 32), generator=torch.Generator().manual_seed(b)) for b in (4, 1)]
    smallest = []
    for idx in batches:
        info = jitckpt.plan(jitckpt.checkpoint(family.eager(0), (idx,), memory_limit="min", profile_repeats=1))
        smallest.append(info["memory_limit"] / info["unconstrained_peak"])
    fraction = sum(smallest) / 2
    assert smallest[0] < fraction < smallest[1], smallest  # else this proves nothing

    def steps(model):
        record = []
        for idx in batches:
            model.zero_grad(set_to_none=True)
            with jitckpt.cpu_memory() as memory:
                output = model(idx)
                families.loss_of(output).backward()
            record.append((output.detach(), [p.grad.clone() for p in model.parameters()], memory.peak, output))
        return record

    reference, again = steps(family.eager(0)), steps(family.eager(0))
    model = jitckpt.checkpoint(family.eager(0), memory_limit=fraction, profile_repeats=1)
    trained = steps(model)
    plans = [jitckpt.plan(rewritten) for _, rewritten in reversed(model._captures)]  # batch 4, then 1
    assert len(plans) == 2 and plans[1]["input_shapes"][0][0] == 1 and not plans[1].get("over_limit")
    assert plans[1]["memory_limit"] == plans[0]["memory_limit"] > fraction * plans[1]["unconstrained_peak"]
    for idx, a, b, c, info in zip(batches, reference, again, trained, plans):
        assert all(torch.equal(x, y) and torch.equal(x, z) for x, y, z in zip([a[0]] + a[1], [b[0]] + b[1], [c[0]] + c[1]))
        peak = c[2] + families.caller_held_bytes(model.rewritten, (idx,))
        loss_bytes = families.loss_held_bytes(c[3], families.loss_of)
        assert peak <= info["memory_limit"] + loss_bytes + families.OUTSIDE_CHAIN_BYTES, (peak, info["memory_limit"])


@pytest.mark.parametrize("how", ["deepcopy", "torch.save"])
def test_a_copy_or_a_saved_module_trains_its_own_parameters(how, tmp_path):
    """copy.deepcopy (an EMA or a teacher made from the model) and torch.save of the whole module
    give a module that captures and trains its own parameters, not the original's."""
    batches = hf_batches("causal_lm")
    original = jitckpt.checkpoint(hf_style.make("causal_lm", seed=0), memory_limit=0.6, profile_repeats=1)
    original(**batches[0]).loss.backward()  # captured and planned before the copy
    before = [(p.detach().clone(), p.grad.clone()) for p in original.parameters()]
    if how == "deepcopy":
        copied = copy.deepcopy(original)
    else:
        torch.save(original, tmp_path / "model.pt")
        copied = torch.load(tmp_path / "model.pt", weights_only=False)
    assert isinstance(copied, jitckpt.CheckpointedModule) and copied.rewritten is None
    for p in copied.parameters():
        p.grad = None
    reference, again = copy.deepcopy(copied.module), copy.deepcopy(copied.module)
    expected = adamw_steps(reference, batches)
    assert_same(expected, adamw_steps(again, batches), "eager twice")
    assert_same(expected, adamw_steps(copied, batches), f"a module made by {how}")
    assert "schedule" in jitckpt.plan(copied)
    for p, (value, grad) in zip(original.parameters(), before):
        assert torch.equal(p, value) and torch.equal(p.grad, grad), "the copy trained the original"


def test_a_copy_of_a_module_that_trains_through_torchscript_scripts_its_own():
    x = torch.randn(64, 8)
    original = jitckpt.checkpoint(DataDependent(), memory_limit="min", profile_repeats=1)
    with pytest.warns(UserWarning, match="trains through TorchScript instead"):
        original(x).sum().backward()
    copied = copy.deepcopy(original)
    assert copied.rewritten is None and "_scripted" not in dict(copied.named_children())
    reference = copy.deepcopy(copied.module)
    with torch.no_grad():
        for p, q in zip(copied.module.parameters(), reference.parameters()):
            p.mul_(-1), q.mul_(-1)
            p.grad = None
    reference(x).sum().backward()
    with pytest.warns(UserWarning, match="trains through TorchScript instead"):
        copied(x).sum().backward()
    assert copied.front_end == "script"
    for p, q in zip(copied.module.parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad)
