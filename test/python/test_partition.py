"""Partition of scripted torchvision models: stage counts derived from the architectures, and the
piecewise run (prologue, each stage graph alone, epilogue) equal to the module, bit for bit."""
import copy
import re
from typing import List

import pytest
import torch
import torchvision

import jitckpt

import families
from lit_models import EmaOfActivations  # also a lit case (test/passes/partition.test)

# name -> (constructor kwargs, input size, expected stage count, why)
MODELS = {
    # ResNet: one-tensor cuts exist only between residual blocks (the identity is live inside
    # one): stem (conv1, bn1, relu, maxpool) + one stage per block + the classifier (fc).
    "resnet18": ({}, 64, 1 + 8 + 1, "stem + 8 BasicBlocks + fc"),
    "resnet50": ({}, 64, 1 + 16 + 1, "stem + 16 Bottlenecks + fc"),
    # VGG: one stage per heavy op (relu and pooling join the layer before them).
    "vgg11": ({}, 64, 8 + 3, "8 convolutions + 3 linear layers"),
    # MobileNetV2: each InvertedResidual is a prim::If on use_res_connect, never split.
    "mobilenet_v2": ({}, 64, 1 + 17 + 1 + 1, "features.0 + 17 InvertedResiduals + features.18 + classifier"),
    # DenseNet: a dense block keeps a list of features live; the cuts inside it carry the list's
    # tensors. By tensor count (no example inputs) each dense layer's two convolutions get a stage.
    "densenet121": ({}, 64, 1 + 2 * 58 + 3 + 1, "stem + 2 per dense layer + 3 transition convs + classifier"),
    # Inception v3 (input 299: the aux branch needs 17x17 after Mixed_6e): 5 BasicConv2d stem
    # stages + Mixed_5b..6e; the aux branch yields an Optional[Tensor] live until the output
    # tuple, so the chain ends before it and Mixed_7* stay in the epilogue.
    "inception_v3": ({"aux_logits": True, "init_weights": False}, 299, 5 + 8, "5 stem convs + 8 Inception modules"),
}


def scripted(name):
    kwargs, size, _, _ = MODELS[name]
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(**kwargs)
    return torch.jit.script(model), torch.randn(2, 3, size, size)


def assert_same(a, b):
    if a is None or b is None:
        assert a is None and b is None
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)


@pytest.mark.parametrize("name", list(MODELS))
def test_torchvision_partition_runs_exactly(name):
    module, x = scripted(name)
    info = jitckpt._C.partition(module)
    expected, why = MODELS[name][2], MODELS[name][3]
    assert info["num_stages"] == expected, f"{name}: expected {why}\n{info['labels']}"
    assert info["warnings"] == []
    if name == "densenet121":
        # The widest cut: between the two convolutions of the third dense block's last layer, the
        # block's input, its 23 earlier layers' features and the bottleneck.
        assert max(info["num_activation_inputs"]) == 1 + 23 + 1
    else:  # every boundary carries one tensor
        assert info["num_activation_inputs"] == [1] * expected
    assert info["num_chain_outputs"] == 1
    for train in (True, False):
        reference = copy.deepcopy(module).train(train)
        piecewise = copy.deepcopy(module).train(train)
        torch.manual_seed(1)  # dropout: both paths draw the same numbers in the same order
        want = reference(x)
        torch.manual_seed(1)
        got, boundaries = jitckpt._C.run_partitioned(piecewise, (x,))
        assert_same(got, want)
        assert len(boundaries) == expected + 1
        # BatchNorm statistics were updated exactly once, as by the reference.
        for (n, a), (_, b) in zip(reference.named_buffers(), piecewise.named_buffers()):
            assert torch.equal(a, b), n


def test_resnet_blocks_are_stages_and_batchnorm_buffers_are_mutated():
    module, _ = scripted("resnet18")
    info = jitckpt._C.partition(module)
    assert info["labels"][1:9] == [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]
    assert not any(info["writes_activation_input"])  # out += identity writes `out`, not the input
    assert "layer1.0.bn1.num_batches_tracked" in info["mutated_lifted"][1]
    assert "layer1.0.bn1.running_mean" in info["mutated_lifted"][1]
    assert ("bn1.training", "scalar") in info["lifted"]


def test_max_stages_limits_the_chain():
    module, x = scripted("resnet50")
    module.eval()
    info = jitckpt._C.partition(module, max_stages=4)
    assert info["num_stages"] == 4
    got, _ = jitckpt._C.run_partitioned(module, (x,), max_stages=4)
    assert torch.equal(got, module(x))


class InplaceResidual(torch.nn.Module):
    """b = 2 * c1(x); b += c2(b): the cut after the multiplication is written by the next stage,
    the cut right after c1 is not."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.c2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.c3 = torch.nn.Conv2d(4, 2, 1)

    def forward(self, x):
        b = self.c1(x) * 2
        b.add_(self.c2(b))
        return self.c3(b)


@pytest.mark.parametrize("move", [True, False])
def test_inplace_boundary_is_moved_or_marked(move):
    torch.manual_seed(0)
    module = torch.jit.script(InplaceResidual())
    x = torch.randn(2, 3, 8, 8)
    info = jitckpt._C.partition(module, move_cuts_off_inplace_writes=move)
    assert info["num_stages"] == 3
    assert info["writes_activation_input"] == [False, not move, False]
    got, boundaries = jitckpt._C.run_partitioned(module, (x,), move_cuts_off_inplace_writes=move)
    assert torch.equal(got, module(x))
    if not move:
        # The stage wrote its input in place: exactly the hazard the runtime must guard against.
        assert not torch.equal(boundaries[1][0], module.c1(x) * 2)


def test_single_stage_warning_reaches_python_warnings():
    import warnings

    class Elementwise(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2

    for attempt in range(2):  # each model that gets one stage says so, not the first alone
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            info = jitckpt.partition(torch.jit.script(Elementwise()))
        assert info["num_stages"] == 1
        assert any("single stage" in str(w.message) and "holds 0 compute-heavy op(s)" in str(w.message)
                   for w in caught), (attempt, [str(w.message) for w in caught])


class LayersUnderAFlag(torch.nn.Module):
    """A config switch read in forward: its `if` holds every layer, and the inside of an `if` is
    never cut."""

    def __init__(self):
        super().__init__()
        self.use_layers = True
        self.layers = torch.nn.ModuleList([torch.nn.Linear(32, 32) for _ in range(6)])

    def forward(self, x):
        if self.use_layers:
            for layer in self.layers:
                x = torch.tanh(layer(x))
        return x


def test_single_stage_warning_names_an_if_that_holds_the_layers():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = jitckpt.partition(torch.jit.script(LayersUnderAFlag()), (torch.randn(8, 32),))
    assert info["num_stages"] == 1
    messages = [str(w.message) for w in caught]
    assert any(re.search(r"single stage .*one `if` at .*test_partition.py:\d+ holds 6 compute-heavy ops.*"
                         r"torch.jit.Final", m) for m in messages), messages


class GlobalResidual(torch.nn.Module):
    """return x + body(x) (denoising, super-resolution): every cut in the body carries x too."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Conv2d(4, 4, 3, padding=1) for _ in range(6)])

    def forward(self, x):
        h = x
        for layer in self.layers:
            h = torch.relu(layer(h))
        return x + h


def test_a_global_residual_gets_a_stage_per_layer_and_trains_exactly():
    def make():
        torch.manual_seed(0)
        return torch.jit.script(GlobalResidual().train())

    x = torch.randn(2, 4, 16, 16)
    rewritten = jitckpt.checkpoint(make(), (x,), memory_limit="min", profile_repeats=1)
    plan = jitckpt.plan(rewritten)
    assert plan["num_stages"] == 6, plan["labels"]
    assert plan["memory_limit"] < plan["unconstrained_peak"]
    reference = make()
    with torch.jit.optimized_execution(False):
        for model in (reference, rewritten):
            model(x).square().sum().backward()
    for (name, a), (_, b) in zip(reference.named_parameters(), rewritten.named_parameters()):
        assert b.grad is not None and torch.equal(a.grad, b.grad), name



class PaddedEncoder(torch.nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, 0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(x, src_key_padding_mask=mask)


def test_transformer_encoder_layers_are_stages():
    """PyTorch 2.x's nn.TransformerEncoderLayer builds its own additive padding mask with
    zeros_like(mask).masked_fill_(mask, -inf): AliasDb counted that as a write to the encoder's
    optional mask, which then could not be lifted, and the whole encoder became one stage (3 stages
    for any number of layers). Each layer is a stage on 1.13 and 2.x."""
    torch.manual_seed(0)
    model = torch.jit.script(PaddedEncoder(4))
    x = torch.randn(2, 6, 16)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1, 4:] = True
    info = jitckpt.partition(model, (x, mask))
    assert info["num_stages"] >= 4, info["labels"]
    expected = model(x, mask)
    rewritten = jitckpt.checkpoint(model, (x, mask), memory_limit=None)
    torch.testing.assert_close(rewritten(x, mask), expected, rtol=0, atol=0)


class CollectedFeatures(torch.nn.Module):
    """Returns every layer's output in a list grown by append: the list crosses the chain's end."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Conv2d(4 if i else 3, 4, 3, padding=1) for i in range(4)])

    def forward(self, x) -> List[torch.Tensor]:
        features: List[torch.Tensor] = []
        for layer in self.layers:
            x = torch.relu(layer(x))
            features.append(x)
        return features


def test_a_returned_list_crosses_the_chain_end_and_runs_exactly():
    module = torch.jit.script(CollectedFeatures().eval())
    x = torch.randn(2, 3, 8, 8)
    info = jitckpt._C.partition(module)
    assert info["num_stages"] == 4 and info["num_chain_outputs"] == 4
    got, boundaries = jitckpt._C.run_partitioned(module, (x,))
    assert_same(got, module(x))
    assert [len(b) for b in boundaries] == [1, 1, 2, 3, 4]


def test_a_mask_made_inside_a_stage_is_not_a_write_to_its_input():
    """PyTorch 2.x's F._canonical_mask writes a tensor it has just made (zeros_like(mask)
    .masked_fill_), which AliasDb puts among the wildcards with the layer's input: no stage may be
    taken for one that writes its input (a copy of it each run, and a false warning)."""
    import warnings

    x = torch.randn(4, 12, 16)
    mask = torch.zeros(4, 12, dtype=torch.bool)
    mask[1, 8:] = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = jitckpt.partition(torch.jit.script(PaddedEncoder(3).train()), (x, mask))
    assert info["num_stages"] >= 3
    assert not any(info["writes_activation_input"]), info["writes_activation_input"]
    assert not any("writes its input" in str(w.message) for w in caught)


def test_torch_transformer_gets_a_stage_per_layer_and_sublayer():
    """PyTorch's own nn.Transformer (test/models/families.py, 3 + 3 layers). On 2.x its decoder derives
    tgt_is_causal from the target's length and every decoder layer reads it: as a bool live across
    the layers it left no cut between them (3 decoder stages), now it crosses them as a tensor and
    each self-attention, cross-attention and feed-forward block is a stage. The encoder's optional
    padding mask for its layers comes from its input: the chain starts after it, with the
    embeddings before the chain, where that separates as many heavy ops as starting at the
    embeddings (a tie at 3 layers, decided by the largest stage, that left the encoder in one
    stage)."""
    family = families.FAMILIES["torch_transformer"]("test")
    layers = family.blocks // 2
    labels = jitckpt.partition(family.make(0), family.inputs)["labels"]
    encoder = [label for label in labels if label.startswith("transformer.encoder")]
    decoder = [label for label in labels if label.startswith("transformer.decoder")]
    assert len(encoder) >= layers and len(decoder) >= 2 * layers, labels


class ItemScale(torch.nn.Module):
    """A scale that forward reads off its first layer's output with .item() (a TorchScript Scalar)
    and every block applies."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        scale = h.detach().std().item()
        for block in self.blocks:
            h = torch.tanh(block(h)) * scale
        return h


def test_a_number_from_item_crosses_cuts():
    """The scale crosses the cuts between the blocks as a 0-dim tensor (each block was in one stage
    with it), and training at "min" is bit for bit."""
    x = torch.randn(4, 8)

    def make():
        torch.manual_seed(0)
        return torch.jit.script(ItemScale())

    labels = jitckpt.partition(make(), (x,))["labels"]
    assert labels == ["first", "blocks.0", "blocks.1", "blocks.2"], labels
    model, reference = jitckpt.checkpoint(make(), (x,), memory_limit="min"), make()
    for m in (model, reference):
        with torch.jit.optimized_execution(False):
            m(x).pow(2).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad), name


class FlagBesideAWideLayer(torch.nn.Module):
    """A flag from the first layer's output read after every layer, and layers 8 -> 64 -> 8 in the
    middle: the wide output is carried by the cut after layers.1."""

    def __init__(self):
        super().__init__()
        self.l0 = torch.nn.Linear(8, 8)
        self.layers = torch.nn.ModuleList(
            [torch.nn.Linear(8, 8), torch.nn.Linear(8, 64), torch.nn.Linear(64, 8), torch.nn.Linear(8, 8)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.l0(x)
        wide = h.size(0) > 2
        for layer in self.layers:
            h = torch.relu(layer(h))
            if wide:
                h = h * 2.0
        return h


def test_a_carried_flag_does_not_make_a_wide_cut_look_like_the_inside_of_a_block():
    """By bytes, a cut that carries a tensor of the cut before it and more than its neighbours is
    dropped as the inside of a block; the carried flag, live at every cut, made the cut after
    layers.1 look so, and layers.1 and layers.2 shared a stage (found by a helper's review)."""
    torch.manual_seed(0)
    labels = jitckpt.partition(torch.jit.script(FlagBesideAWideLayer()), (torch.randn(4, 8),))["labels"]
    assert labels == ["l0", "layers.0", "layers.1", "layers.2", "layers.3"], labels


@pytest.mark.parametrize("cuts", ["cheapest", "every"])
def test_no_cut_carries_a_buffer_that_a_later_stage_writes(cuts):
    """A checkpoint that aliases a buffer changes when a later stage writes the buffer, and a
    recomputation from it writes the buffer itself: with every cut offered, the cut between mul_
    and add_ did so (found by the fuzzer). Revolve recomputes every stage, two steps."""

    def make():
        torch.manual_seed(0)
        return torch.jit.script(EmaOfActivations().train())

    x = torch.randn(2, 3, 8, 8)
    rewritten = jitckpt.checkpoint(make(), (x,), "min", strategy="revolve", cuts=cuts, profile_repeats=1)
    assert jitckpt.plan(rewritten)["num_stages"] >= 3
    reference = make()
    with torch.jit.optimized_execution(False):
        for _ in range(2):
            for model in (reference, rewritten):
                model(x).square().sum().backward()
    for (name, a), (_, b) in zip(reference.named_parameters(), rewritten.named_parameters()):
        assert torch.equal(a.grad, b.grad), name
    assert torch.equal(reference.ema, rewritten.ema)
