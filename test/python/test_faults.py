"""Faults (issue: exact or refused): a CPU allocation that fails anywhere in a training step raises
a clear error and loses nothing (the chain's buffers are either as before the step or as after its
forward, never half-updated, and the next step is bit-identical to the unmodified model's); two
threads stepping one rewritten module at different shapes at once stay exact while they share its
re-plan cache."""
import threading

import pytest
import torch
from torch import nn

import jitckpt
from test_checkpoint import X, copy_of, scripted, step


def buffers_of(module):
    return {n: b.clone() for n, b in module.named_buffers()}


def same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def forward_allocations(model) -> int:
    """CPU allocations of one forward, which runs (its buffers move)."""
    jitckpt._C.start_cpu_memory_counting()
    start = jitckpt._C.cpu_allocations()
    model(X)
    return jitckpt._C.cpu_allocations() - start


def fail_forward_at(model, allocation: int) -> None:
    """A forward whose `allocation`-th CPU allocation fails: it must raise out of memory (the call's
    own error, not one of the rollback's)."""
    jitckpt._C.fail_cpu_allocation(max(1, allocation))
    try:
        with pytest.raises(RuntimeError, match="out of memory"):
            model(X)
    finally:
        jitckpt._C.fail_cpu_allocation(0)


@pytest.fixture(scope="module")
def profiled():
    return jitckpt.checkpoint(scripted(), (X,), memory_limit=None, profile_repeats=1)


@pytest.fixture(scope="module")
def allocations_per_step(profiled):
    """CPU allocations of one step of the rewritten module (a copy, so nothing else moves)."""
    jitckpt._C.start_cpu_memory_counting()
    model = jitckpt.checkpoint(scripted(), (X,), memory_limit=0.8, reuse_profile_of=profiled)
    step(model, X, 1)
    before = jitckpt._C.cpu_allocations()
    step(model, X, 2)
    return jitckpt._C.cpu_allocations() - before


@pytest.mark.parametrize("position", [0.02, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.98])
def test_an_allocation_failure_anywhere_in_a_step_loses_nothing(profiled, allocations_per_step, position):
    reference = scripted()
    rewritten = jitckpt.checkpoint(copy_of(reference), (X,), memory_limit=0.8, reuse_profile_of=profiled)
    step(reference, X, 1)
    step(rewritten, X, 1)
    before = buffers_of(rewritten)
    after_forward = scripted()  # where the buffers are once the failed step's forward is done
    after_forward.load_state_dict(reference.state_dict())
    torch.manual_seed(2)
    with torch.jit.optimized_execution(False):
        after_forward(X)
    jitckpt._C.fail_cpu_allocation(max(1, int(position * allocations_per_step)))
    try:
        with pytest.raises(RuntimeError, match="out of memory"):
            step(rewritten, X, 2)
    finally:
        jitckpt._C.fail_cpu_allocation(0)
    now = buffers_of(rewritten)
    assert same(now, before) or same(now, buffers_of(after_forward)), "buffers half-updated"
    if not same(now, before):  # the forward had finished: the reference runs it too
        torch.manual_seed(2)
        with torch.jit.optimized_execution(False):
            reference(X)
    out_a, grads_a, buffers_a = step(reference, X, 3)
    out_b, grads_b, buffers_b = step(rewritten, X, 3)
    assert torch.equal(out_a, out_b)
    assert all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)
    assert same(buffers_a, buffers_b)


class RunningFeatures(nn.Module):
    """Keeps a running average of its 2-D feature map in a buffer updated in place (a rank other
    than BatchNorm's vectors and counters), beside BatchNorm."""

    def __init__(self):
        super().__init__()
        self.first = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Tanh(),
                                   nn.Conv2d(8, 8, 3, padding=1), nn.Tanh(), nn.BatchNorm2d(8))
        self.rest = nn.Sequential(*[nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.Tanh())
                                    for _ in range(3)])
        self.register_buffer("average", torch.zeros(16, 16))

    def forward(self, x):
        x = self.first(x)
        self.average.mul_(0.9).add_(x.detach().mean(dim=(0, 1)), alpha=0.1)
        x = self.rest(x)
        return x.mean(dim=(2, 3))


def running_features(seed=0):
    torch.manual_seed(seed)
    return torch.jit.script(RunningFeatures().train())


@pytest.fixture(scope="module")
def running_features_profiled():
    return jitckpt.checkpoint(running_features(), (X,), memory_limit=None, profile_repeats=1)


@pytest.mark.parametrize("position", [0.7, 0.8, 0.9])
def test_a_forward_that_fails_restores_a_matrix_buffer_too(running_features_profiled, position):
    rewritten = jitckpt.checkpoint(running_features(), (X,), memory_limit="min",
                                   reuse_profile_of=running_features_profiled)
    assert jitckpt.plan(rewritten)["num_stages"] >= 3
    jitckpt._C.start_cpu_memory_counting()
    step(rewritten, X, 1)
    before = buffers_of(rewritten)
    with torch.jit.optimized_execution(False):
        # (moves the average, after about half the forward, and the norm's statistics)
        allocations = forward_allocations(rewritten)
        assert not same(buffers_of(rewritten), before)
        before = buffers_of(rewritten)
        fail_forward_at(rewritten, int(position * allocations))
    assert same(buffers_of(rewritten), before), "a forward that failed left buffers updated"


class GrowingHistory(nn.Module):
    """Appends each call's mean activation to a buffer it grows in place (resize_)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Tanh(), nn.Conv2d(8, 8, 3, padding=1), nn.Tanh())
        self.rest = nn.Sequential(*[nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.Tanh()) for _ in range(3)])
        self.register_buffer("history", torch.zeros(2))

    def forward(self, x):
        x = self.first(x)
        n = self.history.size(0)
        self.history.resize_([n + 1])
        self.history[n] = x.detach().mean()
        return self.rest(x).mean(dim=(2, 3))


def test_a_buffer_that_forward_resizes_gets_its_shape_back():
    torch.manual_seed(0)
    model = torch.jit.script(GrowingHistory().train())
    # Planning runs forward on the example inputs and puts every buffer back (it aborted the
    # process when a buffer had grown).
    rewritten = jitckpt.checkpoint(model, (X,), memory_limit="min", profile_repeats=1)
    assert torch.equal(model.history, torch.zeros(2)) and jitckpt.plan(rewritten)["num_stages"] >= 3
    with torch.jit.optimized_execution(False):
        allocations = forward_allocations(rewritten)
        assert rewritten.history.shape == (3,)
        before = buffers_of(rewritten)
        fail_forward_at(rewritten, int(0.9 * allocations))
    assert same(buffers_of(rewritten), before), "a forward that failed left a resized buffer"


class Deterministic(nn.Module):
    """No random ops and no buffers: what two threads may step at once."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1) for i in range(5)])
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        for conv in self.convs:
            x = torch.relu(conv(x))
        return self.head(x.mean(dim=(2, 3)))


def test_two_threads_at_different_shapes_stay_exact():
    # No limit: a re-plan profiles while the other thread allocates, and the counting allocator
    # counts both, so a limit near the smallest could be found infeasible by chance.
    torch.manual_seed(0)
    reference = torch.jit.script(Deterministic())
    rewritten = jitckpt.checkpoint(copy_of(reference), (torch.randn(4, 3, 16, 16),), memory_limit=None,
                                   profile_repeats=1)
    batches = {4: torch.randn(4, 3, 16, 16), 6: torch.randn(6, 3, 20, 20), 2: torch.randn(2, 3, 12, 12)}

    def gradients(model, x):
        with torch.jit.optimized_execution(False):
            return torch.autograd.grad(model(x).square().mean(), list(model.parameters()))

    # The reference runs in a thread too: a new thread's kernels may split work differently from
    # the main thread's (the unmodified model differs between the two in its last bits).
    expected = {}
    reference_thread = threading.Thread(
        target=lambda: expected.update({b: gradients(reference, x) for b, x in batches.items()}))
    reference_thread.start()
    reference_thread.join()
    failures = []

    def worker(sizes):
        try:
            for b in sizes:
                got = gradients(rewritten, batches[b])
                if not all(torch.equal(g, e) for g, e in zip(got, expected[b])):
                    failures.append(f"batch {b}: gradients differ")
        except Exception as error:  # reported by the main thread
            failures.append(repr(error))

    threads = [threading.Thread(target=worker, args=(order,)) for order in ([4, 6, 2, 6, 4], [6, 2, 4, 2, 6])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert len(jitckpt.plan(rewritten)["variants"]) == 2  # each new shape planned once
