"""cuts="every": the partition offers the solver each cut between two compute-heavy ops that
carries new tensors, not only the cheapest. ResNet-18's stem comes apart into its convolution,
norm and pooling; the gradients stay bit for bit and the measured peak within the limit at the
smallest limit; where one default stage holds several layers, the smallest limit is lower."""
import copy

import pytest
import torch
import torchvision

import jitckpt

import families


def resnet18() -> torch.nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18().train()


def test_every_cut_splits_the_resnet_stem_and_keeps_the_blocks():
    x = torch.randn(2, 3, 64, 64)
    model = torch.jit.script(resnet18())
    cheapest = jitckpt.partition(model, (x,))["labels"]
    every = jitckpt.partition(model, (x,), cuts="every")["labels"]
    assert cheapest[:2] == ["conv1..bn1", "layer1.0"], cheapest
    # The ReLU writes bn1's output in place: the cut before it would need a copy, so it joins bn1.
    assert every[:3] == ["conv1", "bn1", "max_pool2d"], every
    blocks = [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]
    assert [label for label in every if label.startswith("layer")] == blocks, every
    with pytest.raises(ValueError, match="cuts must be"):
        jitckpt.partition(model, (x,), cuts="all")


def step(model, x) -> torch.Tensor:
    for p in model.parameters():
        p.grad = None
    with torch.jit.optimized_execution(False):
        output = model(x)
        output.square().mean().backward()
    return output.detach()


def test_every_cut_trains_exactly_within_the_smallest_limit():
    x = torch.randn(2, 3, 64, 64)
    eager = resnet18()
    rewritten = jitckpt.checkpoint(torch.jit.script(copy.deepcopy(eager)), (x,), "min", cuts="every",
                                   profile_repeats=1)
    info = jitckpt.plan(rewritten)
    assert info["memory_limit"] < info["unconstrained_peak"]
    reference = torch.jit.script(copy.deepcopy(eager))
    output = step(rewritten, x)  # the gradients' storage, as a training loop holds it
    with jitckpt.cpu_memory() as memory:
        step(rewritten, x)
    # The loss and the epilogue's small tensors lie outside the plan; the input, allocated before
    # the step, inside it.
    peak = memory.peak + families.caller_held_bytes(rewritten, (x,))
    loss_bytes = families.loss_held_bytes(output, lambda o: o.square().mean())
    assert peak <= info["memory_limit"] + loss_bytes + families.OUTSIDE_CHAIN_BYTES, (peak, info["memory_limit"], loss_bytes)
    for _ in range(2):
        step(reference, x)
    for (name, a), (_, b) in zip(reference.named_parameters(), rewritten.named_parameters()):
        assert torch.equal(a.grad, b.grad), name
    for (name, a), (_, b) in zip(reference.named_buffers(), rewritten.named_buffers()):
        assert torch.equal(a, b), name


class NormStack(torch.nn.Module):
    """Norms and activations between two linear layers: one stage by default, whose backward
    holds all six of their outputs at once."""

    def __init__(self):
        super().__init__()
        self.l0, self.l1 = torch.nn.Linear(8, 64), torch.nn.Linear(64, 8)
        self.norms = torch.nn.ModuleList([torch.nn.LayerNorm(64) for _ in range(3)])

    def forward(self, x):
        h = self.l0(x)
        for norm in self.norms:
            h = torch.nn.functional.gelu(norm(h))
        return self.l1(h)


def test_every_cut_lowers_the_smallest_limit_where_a_stage_holds_several_layers():
    torch.manual_seed(0)
    eager = NormStack().train()
    x = torch.randn(4, 256, 8)
    plans = {}
    for cuts in ("cheapest", "every"):
        rewritten = jitckpt.checkpoint(torch.jit.script(copy.deepcopy(eager)), (x,), "min", cuts=cuts,
                                       profile_repeats=1)
        plans[cuts] = jitckpt.plan(rewritten)
    assert plans["cheapest"]["num_stages"] == 2 and plans["every"]["num_stages"] == 8, plans["every"]["labels"]
    assert plans["every"]["memory_limit"] < 0.75 * plans["cheapest"]["memory_limit"]
    reference = torch.jit.script(copy.deepcopy(eager))
    for model in (reference, rewritten):
        step(model, x)
    for (name, a), (_, b) in zip(reference.named_parameters(), rewritten.named_parameters()):
        assert torch.equal(a.grad, b.grad), name
