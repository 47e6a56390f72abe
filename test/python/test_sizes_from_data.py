"""Tensors sized by the data: a model that keeps only the valid tokens (x[mask]) makes tensors as
large as its mask has true entries, which the input shapes do not say. A plan profiled on a batch
with few of them would hold many times its limit on a batch with many. The call that makes
larger tensors than its plan's is planned again at the larger sizes (each stage's costs the larger
of the two profiles) and runs again from where it began, with a warning: its gradients are the
unmodified model's, bit for bit, its step peak within the new plan's limit, and a later smaller
batch keeps that plan."""
import re
import warnings
from typing import Optional

import pytest
import torch
from torch import Tensor, nn

import jitckpt

import families

B, T, D = 8, 256, 32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(D)  # over the valid tokens: its statistics move once per step
        self.up = nn.Linear(D, 4 * D)
        self.drop = nn.Dropout(0.1)  # the call that runs again draws the same masks
        self.down = nn.Linear(4 * D, D)

    def forward(self, h: Tensor) -> Tensor:
        return h + self.down(self.drop(torch.relu(self.up(self.norm(h)))))


class ValidTokens(nn.Module):
    """The valid tokens of a padded batch, through residual blocks: (number of valid tokens, 1)."""

    def __init__(self, blocks: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(D, D)
        self.drop = nn.Dropout(0.1)  # drawn before the call finds its tensors larger
        self.blocks = nn.ModuleList([Block() for _ in range(blocks)])
        self.head = nn.Linear(D, 1)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.drop(self.embed(x))[mask]
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def make() -> torch.jit.ScriptModule:
    torch.manual_seed(0)
    return torch.jit.script(ValidTokens().train())


def batch(valid: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, D, generator=g), torch.rand(B, T, generator=g) < valid


FEW, MANY, MOST, SOME = batch(0.1, 1), batch(0.6, 2), batch(0.9, 3), batch(0.3, 4)
ALL = batch(1.1, 5)  # every token valid


def loss(output: Tensor) -> Tensor:
    return output.pow(2).mean()


def train(model, batches):
    """Output, gradients and buffers after each step (forward as the unmodified model runs)."""
    records = []
    for seed, inputs in enumerate(batches):
        torch.manual_seed(seed)
        model.zero_grad(set_to_none=True)
        with torch.jit.optimized_execution(False):
            output = model(*inputs)
            loss(output).backward()
        records.append((output.detach().clone(), {n: p.grad.clone() for n, p in model.named_parameters()},
                        {n: b.clone() for n, b in model.named_buffers()}))
    return records


def assert_same(reference, other):
    for step, ((out_a, grads_a, bufs_a), (out_b, grads_b, bufs_b)) in enumerate(zip(reference, other)):
        assert torch.equal(out_a, out_b), f"step {step + 1}: outputs differ"
        for n in grads_a:
            assert torch.equal(grads_a[n], grads_b[n]), f"step {step + 1}: gradient of {n} differs"
        for n in bufs_a:
            assert torch.equal(bufs_a[n], bufs_b[n]), f"step {step + 1}: buffer {n} differs"


def plan_in_use(model) -> dict:
    """The plan the model's next call with these shapes runs."""
    return jitckpt.plan(model)


def step_peak(model, inputs) -> int:
    model.zero_grad(set_to_none=True)
    with torch.jit.optimized_execution(False):
        with jitckpt.cpu_memory() as memory:
            loss(model(*inputs)).backward()
    return memory.peak + families.caller_held_bytes(model, inputs)


@pytest.fixture(scope="module")
def reference():
    batches = [FEW, MANY, SOME, MOST, FEW]
    first, second = train(make(), batches), train(make(), batches)
    assert_same(first, second)  # the unmodified model repeats itself
    return batches, first


def test_the_stage_that_indexes_with_the_mask_is_found():
    model = jitckpt.checkpoint(make(), FEW, memory_limit=None, profile_repeats=1)
    info = jitckpt.plan(model)
    assert info["stages_sized_by_data"] == [1], info["text"]
    assert info["num_stages"] >= 4


@pytest.mark.parametrize("limit", ["min", 0.7])
@pytest.mark.parametrize("deferred", [False, True], ids=["example_inputs", "deferred"])
def test_larger_data_plans_again_and_trains_bit_for_bit_within_the_limit(reference, limit, deferred):
    batches, expected = reference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = jitckpt.checkpoint(make(), None if deferred else FEW, memory_limit=limit, profile_repeats=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = train(model, batches)
    grew = [str(w.message) for w in caught if "the data sets the sizes" in str(w.message)]
    # Planned on FEW: MANY and MOST each make larger tensors than any batch before; SOME and the
    # last FEW do not.
    assert len(grew) == 2, grew
    assert_same(expected, records)
    for inputs in (MOST, SOME):
        info = plan_in_use(model)
        outside = families.loss_held_bytes(model(*inputs), loss)
        peak = step_peak(model, inputs)
        assert peak <= info["memory_limit"] + outside + families.OUTSIDE_CHAIN_BYTES, \
            f"measured {peak} bytes, limit {info['memory_limit']} ({info['num_stages']} stages)"


def test_the_plan_for_the_larger_sizes_is_the_one_reported_and_kept():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = jitckpt.checkpoint(make(), FEW, memory_limit="min", profile_repeats=1)
        first = jitckpt.plan(model)["memory_limit"]
        train(model, [MANY])
        grown = jitckpt.plan(model)["memory_limit"]
    assert grown > 2 * first
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: FEW fits the plan for MANY
        train(model, [FEW, SOME])
    assert jitckpt.plan(model)["memory_limit"] == grown


def test_a_byte_limit_too_small_for_the_larger_data_runs_them_at_their_smallest(reference):
    """Training does not stop where the data outgrows a limit in bytes: the larger sizes get their
    smallest limit, with a warning, and train bit for bit within it."""
    batches, expected = reference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        planned = jitckpt.checkpoint(make(), FEW, memory_limit="min", profile_repeats=1)
        model = jitckpt.checkpoint(make(), FEW, memory_limit=jitckpt.plan(planned)["memory_limit"],
                                   reuse_profile_of=planned)
    limit = jitckpt.plan(model)["memory_limit"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same(expected, train(model, batches))
    assert any(re.search(r"no schedule fits the memory limit .* run at their smallest limit", str(w.message))
               for w in caught), [str(w.message) for w in caught]
    grown = plan_in_use(model)
    assert grown["over_limit"] and grown["memory_limit"] == grown["predicted_peak"] > limit
    assert step_peak(model, MOST) <= grown["memory_limit"] + families.OUTSIDE_CHAIN_BYTES


def test_without_a_limit_nothing_is_planned_again():
    model = jitckpt.checkpoint(make(), FEW, memory_limit=None, profile_repeats=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(model, [MOST])
    assert jitckpt.plan(model)["variants"] == []


class TwoGroups(nn.Module):
    """Tokens flattened, two groups of blocks, and between them a cut to a count (each subclass's
    forward): (count, 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(D, D)
        self.first = nn.ModuleList([Block() for _ in range(2)])
        self.second = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(D, 1)


class Truncated(TwoGroups):
    """Cut to the count of valid tokens, read as a number stages after the count was made (before
    the chain: a side value the stages take)."""

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        valid = mask.sum()
        h = self.embed(x.flatten(0, 1))
        for block in self.first:
            h = block(h)
        h = h[: int(valid)]
        for block in self.second:
            h = block(h)
        return self.head(h)


class CutTo(TwoGroups):
    """Cut to a count that forward takes as an int."""

    def forward(self, x: Tensor, n: int) -> Tensor:
        h = self.embed(x.flatten(0, 1))
        for block in self.first:
            h = block(h)
        h = h[:n]
        for block in self.second:
            h = block(h)
        return self.head(h)


class OptionalMask(TwoGroups):
    """Cut to the valid tokens of forward's optional mask where it is given; every token without
    one."""

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        h = self.embed(x.flatten(0, 1))
        for block in self.first:
            h = block(h)
        if mask is not None:
            h = h[mask.flatten()]
        for block in self.second:
            h = block(h)
        return self.head(h)


class PickedCount(TwoGroups):
    """Cut to a count that a flag of the data picks: every token where all are valid, else 64."""

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.embed(x.flatten(0, 1))
        for block in self.first:
            h = block(h)
        if bool(mask.all()):
            n = h.size(0)
        else:
            n = 64
        h = h[:n]
        for block in self.second:
            h = block(h)
        return self.head(h)


class Repeated(TwoGroups):
    """A layer applied as many times as the data says, between the two groups: what its stage keeps
    for the backward grows with the count while its output keeps its size."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(D, D)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.embed(x.flatten(0, 1))
        for block in self.first:
            h = block(h)
        for _ in range(int(mask.sum()) // 256 + 1):
            h = h + 0.5 * torch.tanh(self.body(h))
        for block in self.second:
            h = block(h)
        return self.head(h)


class Packed(TwoGroups):
    """The valid tokens through a wide layer, added back at their positions: the stage's tensors
    grow with the valid tokens while its output keeps its size."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Linear(D, 16 * D)
        self.back = nn.Linear(16 * D, D)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.embed(x.flatten(0, 1))
        for block in self.first:
            h = block(h)
        valid = mask.flatten().nonzero().squeeze(1)
        h = h.index_add(0, valid, self.back(torch.relu(self.wide(h[valid]))))
        for block in self.second:
            h = block(h)
        return self.head(h)


@torch.jit.ignore
def count_valid(mask: Tensor) -> int:
    return int(mask.sum())


class CountedInPython(TwoGroups):
    """Cut to a count that a Python function TorchScript does not compile returns."""

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.embed(x.flatten(0, 1))
        for block in self.first:
            h = block(h)
        h = h[: count_valid(mask)]
        for block in self.second:
            h = block(h)
        return self.head(h)


def plans_again_within_the_limit(cls, batches, larger) -> torch.jit.ScriptModule:
    """Planned at "min" on the first batch, trained on all: sized by the data, planned again with a
    warning, bit for bit like the unmodified model, and a call with the `larger` inputs within the
    limit of the plan it runs. Returns the rewritten module."""
    def make() -> torch.jit.ScriptModule:
        torch.manual_seed(0)
        return torch.jit.script(cls().train())
    expected = train(make(), batches)
    assert_same(expected, train(make(), batches))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = jitckpt.checkpoint(make(), batches[0], memory_limit="min", profile_repeats=1)
    assert jitckpt.plan(model)["stages_sized_by_data"], jitckpt.plan(model)["text"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = train(model, batches)
    assert any("the data sets the sizes" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert_same(expected, records)
    info = plan_in_use(model)
    peak = step_peak(model, larger)
    assert peak <= info["memory_limit"] + families.OUTSIDE_CHAIN_BYTES, \
        f"measured {peak} bytes, limit {info['memory_limit']} ({info['num_stages']} stages)"
    return model


def test_a_count_of_the_data_read_stages_later_plans_again_within_the_limit():
    plans_again_within_the_limit(Truncated, [FEW, MOST, SOME], MOST)


def test_an_int_argument_that_sets_a_size_plans_again_within_the_limit(tmp_path):
    """The plan's input key holds the tensors' shapes, not forward's numbers: the stages that read
    one are sized by the data, also in the module saved and loaded again."""
    x = FEW[0]
    model = plans_again_within_the_limit(CutTo, [(x, 100), (x, 1500), (x, 600)], (x, 1500))
    torch.jit.save(model, str(tmp_path / "cut.pt"))
    loaded = torch.jit.load(str(tmp_path / "cut.pt"))
    assert jitckpt.plan(loaded)["stages_sized_by_data"] == jitckpt.plan(model)["stages_sized_by_data"]


def test_an_optional_mask_of_forward_keeps_the_whole_chain_and_plans_again():
    """The BatchNorms that write their statistics do not keep the optional mask from being lifted
    (the layers before the branch stay in the chain), and the stage that indexes with it is sized
    by the data."""
    model = plans_again_within_the_limit(OptionalMask, [FEW, MOST, (SOME[0],), SOME], (SOME[0],))
    assert jitckpt.plan(model)["labels"][:3] == ["embed", "first.0", "first.1"], jitckpt.plan(model)["labels"]


def test_a_count_from_an_ignored_python_function_plans_again_within_the_limit():
    plans_again_within_the_limit(CountedInPython, [FEW, MOST, SOME], MOST)


def test_a_count_a_flag_of_the_data_picks_plans_again_within_the_limit():
    plans_again_within_the_limit(PickedCount, [FEW, ALL, SOME], ALL)


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_a_loop_as_long_as_the_data_says_plans_again_within_the_limit(autocast):
    """The loop's stage keeps more for its backward on MOST (eight rounds) than on FEW (one) with
    an output of the same size: it runs forward once, before any backward, and what it keeps is
    measured against the plan (under autocast too, where a stage keeps its casts)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model = plans_again_within_the_limit(Repeated, [FEW, MOST, SOME], MOST)
    info = jitckpt.plan(model)
    assert info["stages_sized_by_data"] == [info["labels"].index("body") + 1], info["text"]


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_tensors_that_grow_inside_a_stage_plan_again_within_the_limit(autocast):
    """The packed stage's output keeps its size on MOST; its peak, watched in the forward part of
    the call, does not."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        plans_again_within_the_limit(Packed, [FEW, MOST, SOME], MOST)
