"""Gradients stay bit-identical when stage boundaries carry tensors whose memory layout is not the
default one (channels-last views made by permute, transposed sequences), and when a parameter's
gradients from several stages are added into an existing .grad.

The class of cause guarded here: a reduction's summation order follows the strides of its operand,
so a backward whose gradient at a stage boundary has other strides than the unmodified model's
(same values, other layout) sums e.g. a per-channel scale's gradient, sum_to_size(grad * y), in
another order and differs in the last bits. Taking the boundary gradient out of a detached leaf's
.grad after torch.autograd.backward(inputs=) does that: AccumulateGrad's "gradient layout contract"
re-strides it like the leaf (a channels-last boundary gets a channels-last gradient where the
engine's InputBuffer sum, which the unmodified model passes on, was contiguous). Letting
AccumulateGrad add each stage's part into an existing .grad also reorders the sum of a shared
parameter's gradient: (G + g_b) + g_a instead of G + (g_b + g_a); so does a stage that uses a
parameter twice and sums its own uses before adding them to what the later stages gave, S + (g_b +
g_a) where the engine adds (S + g_b) + g_a; and so does returning a tied
parameter's per-stage gradients at several of the op's inputs (one per attribute path), which
autograd adds in input order, (g_1 + g_2) + g_3, where the unmodified model adds (g_3 + g_2) + g_1.

Each family is checked at the smallest limit that works and without a limit (every stage recorded
once, so no recomputation is involved: the layout alone decides), over two steps, the second
accumulating into .grad without zeroing it, and through torch.autograd.grad."""
import re
from typing import Callable, Dict, List, Optional, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

import jitckpt

SMALLEST = re.compile(r"smallest limit that works is [^(]*\((\d+) bytes\)")


def drop_path(x: Tensor, p: float, training: bool) -> Tensor:
    """Stochastic depth: one Bernoulli draw per sample."""
    if p == 0.0 or not training:
        return x
    keep = 1.0 - p
    shape = [x.shape[0]] + [1] * (x.dim() - 1)
    mask = torch.rand(shape, dtype=x.dtype, device=x.device) < keep
    return x * mask.to(x.dtype) / keep


class LayerNorm2d(nn.LayerNorm):
    """timm's LayerNorm2d: its output is a permuted (channels-last strided) view."""

    def forward(self, x: Tensor) -> Tensor:
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, c: int, p: float, permute: bool, gamma_last: bool, bernoulli: bool):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.fc1 = nn.Linear(c, 4 * c)
        self.fc2 = nn.Linear(4 * c, c)
        self.permute = permute
        self.gamma_last = gamma_last
        self.bernoulli = bernoulli
        self.gamma = nn.Parameter(torch.rand(c) + 0.5 if gamma_last else torch.rand(c, 1, 1) + 0.5)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        y = self.dw(x)
        if self.permute:
            y = self.fc2(F.gelu(self.fc1(self.norm(y.permute(0, 2, 3, 1)))))
            if self.gamma_last:  # gamma (C,) on the channels-last tensor, then back
                y = (self.gamma * y).permute(0, 3, 1, 2)
            else:  # gamma (C, 1, 1) on the permuted (channels-last strided) tensor
                y = self.gamma * y.permute(0, 3, 1, 2)
        else:  # channels-first MLP: 1x1 convolutions
            y = F.group_norm(y, 1)
            y = F.conv2d(y, self.fc1.weight[:, :, None, None], self.fc1.bias)
            y = F.conv2d(F.gelu(y), self.fc2.weight[:, :, None, None], self.fc2.bias)
            y = self.gamma * y
        if self.training and self.p > 0.0:
            if self.bernoulli:
                keep = 1.0 - self.p
                mask = torch.empty([y.shape[0], 1, 1, 1], dtype=y.dtype).bernoulli_(keep)
                y = y * mask / keep
            else:
                y = drop_path(y, self.p, self.training)
        return x + y


class Downsample(nn.Module):
    def __init__(self, c_in: int, c_out: int, ln2d: bool = True):
        super().__init__()
        self.norm = LayerNorm2d(c_in) if ln2d else nn.GroupNorm(1, c_in)
        self.conv = nn.Conv2d(c_in, c_out, 2, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(self.norm(x))


class ConvNeXt(nn.Module):
    def __init__(self, widths=(8, 16), depths=(2, 2), p=0.3, permute=True, gamma_last=False,
                 bernoulli=False, shared_gamma=False, ln2d=True, scale_output=False):
        super().__init__()
        self.scale_output = scale_output
        # ln2d: LayerNorm2d (permuted, channels-last strided outputs) in the stem and downsampling
        # layers, as in ConvNeXt; otherwise GroupNorm(1, C), and every boundary is contiguous.
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 4, stride=4),
                                  LayerNorm2d(widths[0]) if ln2d else nn.GroupNorm(1, widths[0]))
        layers: List[nn.Module] = []
        for i, (w, d) in enumerate(zip(widths, depths)):
            if i > 0:
                layers.append(Downsample(widths[i - 1], w, ln2d))
            for _ in range(d):
                layers.append(ConvNeXtBlock(w, p, permute, gamma_last, bernoulli))
        if shared_gamma:  # one scale for all blocks of the first width: a parameter in several stages
            blocks = [m for m in layers if isinstance(m, ConvNeXtBlock) and m.gamma.shape[0] == widths[0]]
            for m in blocks[1:]:
                m.gamma = blocks[0].gamma
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(widths[-1], 5)
        # scale_output: the first block's scale once more, in the head's stage, under another name
        self.output_scale = layers[1 if len(depths) > 0 and isinstance(layers[0], Downsample) else 0].gamma

    def forward(self, x: Tensor) -> Tensor:
        out = self.head(self.layers(self.stem(x)).mean([2, 3]))
        if self.scale_output:
            out = out * self.output_scale.mean()
        return out


class ChannelsLastResBlock(nn.Module):
    """conv -> GroupNorm -> ReLU -> conv, a per-channel scale (C, 1, 1), stochastic depth, residual."""

    def __init__(self, c: int, p: float):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.norm = nn.GroupNorm(2, c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.scale = nn.Parameter(torch.rand(c, 1, 1) + 0.5)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        y = self.scale * self.conv2(F.relu(self.norm(self.conv1(x))))
        return x + drop_path(y, self.p, self.training)


class ChannelsLastResNet(nn.Module):
    """A CNN whose whole trunk runs in torch.channels_last (the input is converted once)."""

    def __init__(self, c: int = 8, blocks: int = 3, p: float = 0.2):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.blocks = nn.Sequential(*[ChannelsLastResBlock(c, p) for _ in range(blocks)])
        self.head = nn.Linear(c, 5)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x.contiguous(memory_format=torch.channels_last))
        return self.head(self.blocks(x).mean([2, 3]))


class TransposedMixerBlock(nn.Module):
    """MLP-Mixer-like: mixes tokens on the transposed sequence and returns the transposed view, so
    the boundaries alternate between (N, T, C) and (N, C, T)-strided tensors; a per-feature scale."""

    def __init__(self, t: int, c: int, p: float):
        super().__init__()
        self.norm = nn.LayerNorm(c)
        self.mix = nn.Linear(t, t)
        self.scale = nn.Parameter(torch.rand(c, 1) + 0.5)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:  # x: (N, T, C), any strides
        y = self.mix(self.norm(x).transpose(1, 2))  # (N, C, T)
        y = drop_path(self.scale * y, self.p, self.training)
        return (y + x.transpose(1, 2)).transpose(1, 2)  # a (N, T, C) view of an (N, C, T) tensor


class TransposedMixer(nn.Module):
    def __init__(self, t: int = 16, c: int = 12, blocks: int = 4, p: float = 0.2):
        super().__init__()
        self.embed = nn.Linear(6, c)
        self.blocks = nn.Sequential(*[TransposedMixerBlock(t, c, p) for _ in range(blocks)])
        self.head = nn.Linear(c, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.blocks(self.embed(x)).mean(1))


class SharedLayerNet(nn.Module):
    """One Linear shared by every block and used more than once in each, twice in a row or in a
    loop (ALBERT-like, looped models): each stage adds two or more uses of it to its gradient."""

    def __init__(self, d: int = 32, blocks: int = 4, loop: bool = False):
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(d, d) for _ in range(blocks)])
        self.rep = nn.Linear(d, d)
        self.loop = loop

    def forward(self, x: Tensor) -> Tensor:
        for lin in self.lins:
            x = torch.tanh(lin(x))
            if self.loop:
                for _ in range(3):
                    x = torch.tanh(self.rep(x))
            else:
                x = torch.tanh(self.rep(torch.tanh(self.rep(x))))
        return x


def _image(seed: int = 1) -> Tuple[Tensor]:
    return (torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(seed)),)


FAMILIES: Dict[str, Tuple[Callable[[], nn.Module], Callable[[], Tuple[Tensor, ...]]]] = {
    "convnext": (lambda: ConvNeXt(), _image),
    "convnext_no_drop_path": (lambda: ConvNeXt(p=0.0), _image),
    "convnext_bernoulli_gamma_channels_last": (lambda: ConvNeXt(bernoulli=True, gamma_last=True), _image),
    "convnext_channels_first_mlp": (lambda: ConvNeXt(permute=False), _image),
    "convnext_deeper": (lambda: ConvNeXt(depths=(3, 3)), _image),
    "convnext_shared_gamma": (lambda: ConvNeXt(shared_gamma=True), _image),
    # contiguous boundaries: only the order in which the shared scale's gradients are added into
    # .grad (the second step) can differ
    "contiguous_convnext_shared_gamma": (lambda: ConvNeXt(widths=(32, 16), depths=(3, 1), shared_gamma=True, ln2d=False), _image),
    # one scale reached through four attribute paths (three blocks and the head), each path in its
    # own stage: its four gradients must be added in the unmodified model's order
    "contiguous_convnext_scale_tied_four_ways": (
        lambda: ConvNeXt(widths=(32, 16), depths=(3, 1), shared_gamma=True, ln2d=False, scale_output=True), _image),
    # a layer used twice in every stage, or three times in a loop: each stage's uses must be added
    # one at a time to what the later stages gave, (S + g_b) + g_a, as the engine adds them
    "contiguous_shared_layer_twice_per_stage": (lambda: SharedLayerNet(),
                                                lambda: (torch.randn(64, 32, generator=torch.Generator().manual_seed(1)),)),
    "contiguous_shared_layer_in_a_loop": (lambda: SharedLayerNet(loop=True),
                                          lambda: (torch.randn(64, 32, generator=torch.Generator().manual_seed(1)),)),
    "channels_last_resnet": (lambda: ChannelsLastResNet(), lambda: (torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)),
    "transposed_mixer": (lambda: TransposedMixer(), lambda: (torch.randn(4, 16, 6, generator=torch.Generator().manual_seed(1)),)),
}


def make(name: str) -> torch.jit.ScriptModule:
    """The same weights every time (scripting twice with one seed: copy.deepcopy of a scripted
    module breaks its leaves on PyTorch 1.13)."""
    torch.manual_seed(0)
    return torch.jit.script(FAMILIES[name][0]().train())


def rewritten(name: str, limit, profiled: Optional[torch.jit.ScriptModule] = None) -> torch.jit.ScriptModule:
    inputs = FAMILIES[name][1]()
    try:
        return jitckpt.checkpoint(make(name), inputs, memory_limit=limit, profile_repeats=1,
                                  reuse_profile_of=profiled)
    except RuntimeError as error:
        named = SMALLEST.search(str(error))
        if named is None:
            raise
    return jitckpt.checkpoint(make(name), inputs, memory_limit=int(named.group(1)), profile_repeats=1,
                              reuse_profile_of=profiled)


def loss_of(model: torch.jit.ScriptModule, inputs, seed: int) -> Tensor:
    torch.manual_seed(seed)  # stochastic depth
    with torch.jit.optimized_execution(False):
        return model(*inputs).square().mean()


def train(model: torch.jit.ScriptModule, inputs) -> List[Dict[str, Tensor]]:
    """Two steps: the first from .grad None, the second adding into the first's .grad."""
    model.zero_grad(set_to_none=True)
    grads = []
    for seed in range(2):
        with torch.jit.optimized_execution(False):
            loss_of(model, inputs, seed).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    return grads


def autograd_grads(model: torch.jit.ScriptModule, inputs) -> Dict[str, Tensor]:
    named = list(model.named_parameters())
    with torch.jit.optimized_execution(False):
        grads = torch.autograd.grad(loss_of(model, inputs, 0), [p for _, p in named], allow_unused=True)
    return {n: g for (n, _), g in zip(named, grads) if g is not None}


def mismatches(reference: Dict[str, Tensor], other: Dict[str, Tensor]) -> List[str]:
    found = []
    for n, a in reference.items():
        b = other.get(n)
        if b is None:
            found.append(f"{n}: no gradient")
        elif not torch.equal(a, b):
            found.append(f"{n}: max abs difference {(a.double() - b.double()).abs().max().item():.3g}")
    found += [f"{n}: a gradient the reference does not have" for n in other if n not in reference]
    return found


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def profiled(family) -> torch.jit.ScriptModule:
    return rewritten(family, None)


@pytest.fixture(scope="module", params=["smallest", "none"])
def limit(request, profiled):
    return jitckpt.plan(profiled)["curve"][0][0] if request.param == "smallest" else None


def test_backward_is_bit_identical_with_strided_boundaries(family, profiled, limit):
    inputs = FAMILIES[family][1]()
    reference = train(make(family), inputs)
    model = rewritten(family, limit, profiled)
    assert jitckpt.plan(model)["num_stages"] >= 3, f"{family}: too few stages for the test to mean anything"
    got = train(model, inputs)
    bad = [f"step {step}: {m}" for step, (a, b) in enumerate(zip(reference, got), start=1) for m in mismatches(a, b)]
    assert not bad, f"{family}, limit {limit}: " + "; ".join(bad)


def test_autograd_grad_is_bit_identical_with_strided_boundaries(family, profiled, limit):
    inputs = FAMILIES[family][1]()
    bad = mismatches(autograd_grads(make(family), inputs), autograd_grads(rewritten(family, limit, profiled), inputs))
    assert not bad, f"{family}, limit {limit}: " + "; ".join(bad)


def test_the_families_have_strided_boundaries():
    """The test above only means something if a stage boundary carries a tensor that is not
    contiguous in the default (row-major) order: check the unmodified models' block outputs."""
    def strided(t: Tensor) -> bool:
        return not t.is_contiguous()

    seen = {}
    for name in [n for n in FAMILIES if not n.startswith("contiguous_")]:
        torch.manual_seed(0)
        model = FAMILIES[name][0]().train()
        found = []
        hooks = [m.register_forward_hook(lambda _m, _i, out: found.append(strided(out)))
                 for m in model.modules() if isinstance(m, (LayerNorm2d, ChannelsLastResBlock, TransposedMixerBlock))]
        with torch.no_grad():
            model(*FAMILIES[name][1]())
        for h in hooks:
            h.remove()
        seen[name] = any(found)
    assert all(seen.values()), f"families without a strided block output: {[n for n, s in seen.items() if not s]}"


def test_retain_graph_backward_is_bit_identical(family, profiled, limit):
    """backward(retain_graph=True) differentiates the whole chain at once (one leaf per lifted
    tensor over every stage), not the schedule's B: the same bits there too."""
    inputs = FAMILIES[family][1]()

    def grads(model):
        model.zero_grad(set_to_none=True)
        loss_of(model, inputs, 0).backward(retain_graph=True)
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    bad = mismatches(grads(make(family)), grads(rewritten(family, limit, profiled)))
    assert not bad, f"{family}, limit {limit}: " + "; ".join(bad)
