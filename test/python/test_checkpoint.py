"""End to end: jitckpt.checkpoint, dump, plan, saving, shapes and bad input (issue: end-to-end)."""
import io
import re
import os
import subprocess
import sys
from typing import List, Optional, Tuple

import pytest
import torch
from torch import nn

import jitckpt
from jitckpt.export import capture

import families


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Dropout(0.2),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        )
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def scripted(seed=0):
    torch.manual_seed(seed)
    return torch.jit.script(SmallNet().train())


def copy_of(module):
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)


def step(module, x, seed=1):
    torch.manual_seed(seed)  # dropout
    module.zero_grad(set_to_none=True)
    with torch.jit.optimized_execution(False):
        out = module(x)
        out.pow(2).mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in module.named_parameters()}, \
        {n: b.clone() for n, b in module.named_buffers()}


X = torch.randn(4, 3, 16, 16)


@pytest.fixture(scope="module")
def profiled():
    return jitckpt.checkpoint(scripted(), (X,), memory_limit=None, profile_repeats=1)


@pytest.mark.parametrize("strategy,limit", [("optimal", None), ("optimal", 0.8), ("periodic", None),
                                             ("revolve", 0.9), ("none", None)])
def test_training_steps_are_bit_identical(profiled, strategy, limit):
    reference = scripted()
    rewritten = jitckpt.checkpoint(copy_of(reference), (X,), memory_limit=limit, strategy=strategy,
                                   reuse_profile_of=profiled)
    for seed in (1, 2):  # two steps: BatchNorm statistics and dropout state carry over
        out_a, grads_a, buffers_a = step(reference, X, seed)
        out_b, grads_b, buffers_b = step(rewritten, X, seed)
        assert torch.equal(out_a, out_b)
        assert grads_a.keys() == grads_b.keys()
        for name in grads_a:
            assert torch.equal(grads_a[name], grads_b[name]), name
        for name in buffers_a:
            assert torch.equal(buffers_a[name], buffers_b[name]), name


def test_a_given_schedule_runs_as_given_or_is_refused(profiled):
    """schedule=: run as it is and trains bit for bit, kept through save and load; a schedule the
    chain does not allow, one over the limit, and one beside another strategy are refused, naming
    why."""
    stages = jitckpt.plan(profiled)["num_stages"]
    # Every stage checkpointed at its input, recomputed just before its backward.
    given = " ".join(f"Fck({l})" for l in range(1, stages + 1)) + f" Fall({stages + 1}) B({stages + 1}) " + \
        " ".join(f"Fall({l}) B({l})" for l in range(stages, 0, -1))
    reference = scripted()
    rewritten = copy_of(jitckpt.checkpoint(copy_of(reference), (X,), memory_limit=None, schedule=given,
                                           reuse_profile_of=profiled))
    info = jitckpt.plan(rewritten)
    assert (info["strategy"], info["schedule"]) == ("given", given)
    for seed in (1, 2):
        out_a, grads_a, buffers_a = step(reference, X, seed)
        out_b, grads_b, buffers_b = step(rewritten, X, seed)
        assert torch.equal(out_a, out_b)
        assert all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)
        assert all(torch.equal(buffers_a[n], buffers_b[n]) for n in buffers_a)
    # Planned at the first call of a saved and loaded copy: the schedule travels with the module.
    deferred = copy_of(jitckpt.checkpoint(scripted(), memory_limit=None, schedule=given))
    assert torch.equal(step(deferred, X)[0], step(scripted(), X)[0])
    assert (jitckpt.plan(deferred)["strategy"], jitckpt.plan(deferred)["schedule"]) == ("given", given)
    with pytest.raises(RuntimeError, match="not valid for this chain"):
        jitckpt.checkpoint(scripted(), (X,), memory_limit=None, schedule="Fall(2) B(1)", reuse_profile_of=profiled)
    with pytest.raises(RuntimeError, match="ends before B[(]1[)]"):
        jitckpt.checkpoint(scripted(), (X,), memory_limit=None, schedule=given.rsplit(" ", 1)[0],
                           reuse_profile_of=profiled)
    with pytest.raises(RuntimeError, match="above the memory limit"):
        jitckpt.checkpoint(scripted(), (X,), memory_limit=info["predicted_peak"] - 1, schedule=given,
                           reuse_profile_of=profiled)
    with pytest.raises(ValueError, match="leave strategy"):
        jitckpt.checkpoint(scripted(), (X,), strategy="revolve", schedule=given)


def test_memory_limit_forms_and_plan(profiled):
    info = jitckpt.plan(profiled)
    peak = info["unconstrained_peak"]
    assert info["num_stages"] >= 3 and len(info["curve"]) >= 2
    limits, times = zip(*info["curve"])
    assert list(limits) == sorted(limits) and list(times) == sorted(times, reverse=True)
    for limit in (int(0.8 * peak), f"{0.8 * peak / 2**20:.4f}MiB", 0.8, "80%"):
        plan = jitckpt.plan(jitckpt.checkpoint(scripted(), (X,), memory_limit=limit, reuse_profile_of=profiled))
        assert abs(plan["memory_limit"] - int(0.8 * peak)) <= 128, limit  # MiB text rounds
        assert plan["predicted_peak"] <= plan["memory_limit"]


def test_measured_peak_tracks_prediction(profiled):
    model = jitckpt.checkpoint(scripted(), (X,), memory_limit=0.8, reuse_profile_of=profiled)
    info = jitckpt.plan(model)
    out, _, _ = step(model, X)  # allocate .grad
    with jitckpt.cpu_memory() as memory:
        step(model, X)
    # The step also holds what the loss computes, and the model's own small tensors outside the
    # chain; the limit also counts the input, allocated before the step.
    peak = memory.peak + families.caller_held_bytes(model, (X,))
    loss_bytes = families.loss_held_bytes(out, lambda o: o.pow(2).mean())
    assert peak <= info["memory_limit"] + loss_bytes + families.OUTSIDE_CHAIN_BYTES, (peak, info["memory_limit"], loss_bytes)


def test_dump_shows_graph_and_schedule(profiled):
    text = jitckpt.dump(profiled)
    assert "jitckpt::chain" in text
    assert "schedule: " in text and "B(" in text
    assert text.count("stage ") >= jitckpt.plan(profiled)["num_stages"]


def backward_runs(prof) -> List[Tuple[int, int]]:
    """The B events of a trace as (first stage, last stage): jitckpt::B is one stage, unnamed;
    jitckpt::B7..5 the backward of stages 7, 6 and 5 in one engine call."""
    runs = []
    for e in prof.events():
        if e.name == "jitckpt::B":
            runs.append((0, 0))
        elif re.fullmatch(r"jitckpt::B\d+\.\.\d+", e.name):
            first, last = map(int, e.name[len("jitckpt::B"):].split(".."))
            runs.append((first, last))
    return runs


def test_torch_profiler_names_every_stage_run_of_the_schedule(profiled, monkeypatch):
    monkeypatch.setenv("JITCKPT_GROUP_STAGES", "0")  # every stage apart (test_stage_groups: grouped)
    model = jitckpt.checkpoint(scripted(), (X,), memory_limit="min", reuse_profile_of=profiled)
    schedule = jitckpt.plan(model)["schedule"].split()
    stages = jitckpt.plan(model)["num_stages"]
    step(model, X)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step(model, X)
    calls = {e.key: e.count for e in prof.key_averages()
             if e.key in ("jitckpt::Fall", "jitckpt::Fck", "jitckpt::Fn", "jitckpt::chain",
                          "jitckpt::chain_backward")}
    # One event per op of the schedule (the terminal stage's hand-off is no stage run), and one
    # for the call (the op's own) and one for its backward; B ops of consecutive stages may run
    # as one event.
    expected = {f"jitckpt::{kind}": sum(op.startswith(kind + "(") and op != f"{kind}({stages + 1})"
                                        for op in schedule) for kind in ("Fall", "Fck", "Fn", "B")}
    assert any(op.startswith(("Fck(", "Fn(")) for op in schedule), schedule  # recomputes
    b_ops = expected.pop("jitckpt::B")
    assert calls == {**{k: v for k, v in expected.items() if v}, "jitckpt::chain": 1,
                     "jitckpt::chain_backward": 1}, (calls, schedule)
    runs = backward_runs(prof)
    assert sum(first - last + 1 for first, last in runs) == b_ops, (runs, schedule)
    assert all(first > last for first, last in runs if first), runs


def test_the_backward_of_consecutive_stages_is_one_engine_call(profiled, monkeypatch):
    """With no limit the schedule is every Fall, then B(L) .. B(1). Run apart, the stages' B are
    one call of the autograd engine (a call costs the host a graph task of its own: about 75 µs on
    an H200's host); run as one group, the chain is the unmodified model's graph, recorded on the
    call's own tensors, and the caller's backward differentiates it with no call of jitckpt's.
    Bit for bit either way (test_training_steps_are_bit_identical)."""
    stages = jitckpt.plan(profiled)["num_stages"]
    for grouped, runs in (("1", []), ("0", [(stages, 1)])):
        monkeypatch.setenv("JITCKPT_GROUP_STAGES", grouped)
        step(profiled, X)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step(profiled, X)
        assert backward_runs(prof) == runs, grouped
        names = {e.name for e in prof.events()}
        assert ("jitckpt::chain_backward" in names) == (grouped == "0"), grouped
    # A limit the model fits (twice its peak) gives the same schedule, run the same way.
    monkeypatch.delenv("JITCKPT_GROUP_STAGES")
    roomy = jitckpt.checkpoint(scripted(), (X,), memory_limit=2 * jitckpt.plan(profiled)["predicted_peak"],
                               reuse_profile_of=profiled)
    assert jitckpt.plan(roomy)["schedule"] == jitckpt.plan(profiled)["schedule"]
    step(roomy, X)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step(roomy, X)
    assert "jitckpt::chain_backward" not in {e.name for e in prof.events()}


class TensorIdioms(nn.Module):
    """Tensor ops that TorchScript's PeepholeOptimize rewrites, which the unmodified model (run
    without executor optimization) keeps: a tensor transposed twice across a cut, x + 0, x * 1, a
    cat of a cat."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(6)])

    def forward(self, x):
        a = torch.tanh(self.layers[0](x))
        t = a.t()
        c = torch.tanh(self.layers[1](a)) + a
        d = torch.sin(self.layers[2](c)) + t.t() + (c + 0) * 1
        e = torch.tanh(self.layers[3](d)) + c
        f = torch.tanh(self.layers[4](e)) + a
        g = torch.cat([torch.cat([f, e], 1), d], 1)
        return self.layers[5](g[:, :16] + g[:, 16:32] + g[:, 32:])


def test_tensor_ops_the_peephole_pass_rewrites_keep_their_gradients():
    x = torch.randn(8, 16)
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(torch.jit.script(TensorIdioms().train()))
    reference, rewritten = models[0], jitckpt.checkpoint(models[1], (x,), memory_limit=None)
    assert jitckpt.plan(rewritten)["num_stages"] >= 4
    _, grads_a, _ = step(reference, x)
    _, grads_b, _ = step(rewritten, x)
    # (x.t().t() folded to x: layers.0 got other bits)
    assert [n for n in grads_a if not torch.equal(grads_a[n], grads_b[n])] == []


@torch.jit.ignore
def drop_at_random(x: torch.Tensor) -> torch.Tensor:
    return x * (torch.rand_like(x) > 0.3).to(x.dtype)


class DropsInPython(nn.Module):
    """Every second layer's output masked at random by Python that TorchScript does not compile."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(6)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.relu(layer(x))
            if i % 2 == 1:
                x = drop_at_random(x)
        return x


def test_python_that_draws_random_numbers_draws_the_same_when_recomputed():
    """TorchScript marks no Python call random: a stage recomputed without its generator state
    replayed would mask with other draws than its first run did."""
    x = torch.randn(512, 16)
    gradients = []
    for model in ("eager", "eager", "rewritten"):
        torch.manual_seed(0)
        module = DropsInPython().train()
        if model == "rewritten":
            module = jitckpt.checkpoint(torch.jit.script(module), memory_limit="min", profile_repeats=1)
        torch.manual_seed(1)
        module(x).pow(2).sum().backward()
        gradients.append([p.grad for p in module.parameters()])
    assert "Fn(" in jitckpt.plan(module)["schedule"]  # stages recomputed
    for other in gradients[1:]:
        assert all(torch.equal(a, b) for a, b in zip(gradients[0], other))


def test_verbose_says_how_the_stage_times_were_calibrated(capfd):
    jitckpt.checkpoint(scripted(), (X,), memory_limit=None, profile_repeats=1, verbose=True)
    line = next(l for l in capfd.readouterr().err.splitlines() if "timed the chain" in l)
    measured, summed, scale = (float(w.rstrip(",")) for w in line.split() if w[0].isdigit())
    assert measured > 0 and summed > 0 and 0.5 <= scale <= 2.0, line
    # (the factor is clamped to [0.5, 2]; each figure is printed to 4 digits)
    assert abs(min(max(measured / summed, 0.5), 2.0) - scale) <= 2e-3 * scale, line


def test_impossible_limit_says_the_smallest_that_works(profiled):
    with pytest.raises(RuntimeError, match="smallest limit that works is"):
        jitckpt.checkpoint(scripted(), (X,), memory_limit=1000, reuse_profile_of=profiled)


@pytest.mark.skipif(capture.available(), reason="from 2.6 such a module goes through torch.export (test_eager_modules)")
def test_a_module_that_fails_to_script_keeps_its_parametrized_weights():
    """Scripting reads a parametrized weight, which steps spectral_norm's power iteration (in
    training mode, in place on its buffers): a module refused keeps the buffers it had."""
    from torch.nn.utils.parametrizations import spectral_norm
    torch.manual_seed(0)
    model = nn.Sequential(*[spectral_norm(nn.Linear(16, 16)) for _ in range(3)]).train()
    before = [t.clone() for t in model.state_dict().values()]
    with pytest.raises(TypeError, match="could not be scripted"):
        jitckpt.checkpoint(model, memory_limit="min")
    for i, (a, b) in enumerate(zip(before, model.state_dict().values())):
        assert torch.equal(a, b), f"tensor {i} of the state changed"


def test_bad_inputs_are_clear_errors(profiled):
    with pytest.raises(TypeError, match="scripted module"):
        jitckpt.checkpoint(object(), (X,))

    class Unscriptable(nn.Module):
        def forward(self, x):
            return {1: x}[len(x.shape) ** 0.5]  # float keys with an int-keyed dict: not scriptable

    with pytest.raises(TypeError, match="could not be scripted"):
        jitckpt.checkpoint(Unscriptable(), (X,))
    with pytest.raises(RuntimeError, match=r"running forward on the example inputs failed(.|\n)*to have 3 channels"):
        jitckpt.checkpoint(scripted(), (torch.randn(4, 5, 16, 16),), profile_repeats=1)
    with pytest.raises(RuntimeError, match="forward takes 1 input"):
        jitckpt.checkpoint(scripted(), (X, X), profile_repeats=1)
    with pytest.raises(ValueError, match="already rewritten"):
        jitckpt.checkpoint(profiled, (X,))
    with pytest.raises(ValueError, match="fraction"):
        jitckpt.checkpoint(scripted(), (X,), memory_limit=1.5)
    with pytest.raises(ValueError, match="unknown unit"):
        jitckpt.checkpoint(scripted(), (X,), memory_limit="3 parsecs", reuse_profile_of=profiled)
    # More periodic segments than the chain has stages, at a limit and at "min"
    for limit in (0.8, "min"):
        with pytest.raises(RuntimeError, match=r"periodic: 500 segments for a chain of \d+ stages"):
            jitckpt.checkpoint(scripted(), (X,), memory_limit=limit, strategy="periodic", segments=500,
                               reuse_profile_of=profiled)
    # No memory slots: refused at once, with example inputs or without (it crashed at "min")
    for strategy in ("optimal", "revolve"):
        with pytest.raises(RuntimeError, match="slots .* must be from 1 to 100000, not 0"):
            jitckpt.checkpoint(scripted(), (X,), memory_limit="min", strategy=strategy, slots=0,
                               reuse_profile_of=profiled)
        with pytest.raises(RuntimeError, match="slots .* must be from 1 to 100000, not 0"):
            jitckpt.checkpoint(scripted(), memory_limit="min", strategy=strategy, slots=0)
    with pytest.raises(RuntimeError, match="slots .* must be from 1 to 100000, not 1000000"):
        jitckpt.checkpoint(scripted(), memory_limit="min", slots=10**6)
    with pytest.raises(RuntimeError, match="example input 0 is None, but forward's argument 'x' is a Tensor"):
        jitckpt.checkpoint(scripted(), (None,), memory_limit="min")
    # Negative counts: refused, not read as their defaults
    with pytest.raises(RuntimeError, match="max_stages must be 0 .* not -1"):
        jitckpt.checkpoint(scripted(), (X,), memory_limit="min", max_stages=-1)
    with pytest.raises(RuntimeError, match="profile_repeats must be 0 .* not -1"):
        jitckpt.checkpoint(scripted(), (X,), memory_limit="min", profile_repeats=-1)


def test_a_profile_is_reused_only_for_the_inputs_it_was_measured_on(profiled):
    """Its times and sizes hold for those inputs alone: a larger batch is refused (it was planned
    with the small batch's peak), as is a module that has not profiled yet; the same inputs work,
    also from a module rewritten without example inputs once it has trained."""
    with pytest.raises(RuntimeError, match=r"reused profile was measured on inputs \[4, 3, 16, 16\].*these are "
                                           r"\[16, 3, 16, 16\]"):
        jitckpt.checkpoint(scripted(), (torch.randn(16, 3, 16, 16),), memory_limit=0.8, reuse_profile_of=profiled)
    deferred = jitckpt.checkpoint(scripted(), memory_limit=0.8)
    with pytest.raises(RuntimeError, match="no profile yet"):
        jitckpt.checkpoint(scripted(), (X,), memory_limit=0.8, reuse_profile_of=deferred)
    reused = jitckpt.checkpoint(scripted(), (X,), memory_limit=0.8, reuse_profile_of=profiled)
    assert jitckpt.plan(reused)["unconstrained_peak"] == jitckpt.plan(profiled)["unconstrained_peak"]
    step(deferred, X)  # its first training call profiles: that profile can be reused
    reused = jitckpt.checkpoint(scripted(), (X,), memory_limit=0.8, reuse_profile_of=deferred)
    assert jitckpt.plan(reused)["num_stages"] == jitckpt.plan(profiled)["num_stages"]


def test_helpers_name_what_they_take():
    eager = SmallNet()
    for helper in (jitckpt.plan, jitckpt.dump, jitckpt.strip, jitckpt.plot):
        with pytest.raises(TypeError, match="module that jitckpt.checkpoint returned, not SmallNet"):
            helper(eager)
    assert not jitckpt.is_rewritten(eager)
    with pytest.raises(ValueError, match="already rewritten"):
        jitckpt.partition(jitckpt.checkpoint(scripted()))


def test_save_and_load_in_a_fresh_process(tmp_path, profiled):
    model = jitckpt.checkpoint(scripted(), (X,), memory_limit=0.8, reuse_profile_of=profiled)
    path = str(tmp_path / "model.pt")
    torch.jit.save(model, path)
    torch.save(X, str(tmp_path / "x.pt"))
    _, grads, _ = step(copy_of(model), X)
    torch.save(grads, str(tmp_path / "grads.pt"))
    script = f"""
import sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import torch, jitckpt, onednn_off
m = torch.jit.load({path!r})
x = torch.load({str(tmp_path / 'x.pt')!r})
expected = torch.load({str(tmp_path / 'grads.pt')!r})
torch.manual_seed(1)
m.zero_grad(set_to_none=True)
with torch.jit.optimized_execution(False):
    m(x).pow(2).mean().backward()
for n, p in m.named_parameters():
    assert torch.equal(p.grad, expected[n]), n
print("schedule", jitckpt.plan(m)["schedule"][:20])
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ)
    assert result.returncode == 0, result.stderr
    assert "schedule Fck(1)" in result.stdout or "schedule F" in result.stdout


def test_a_smaller_last_batch_is_replanned_and_exact(profiled):
    reference = scripted()
    rewritten = jitckpt.checkpoint(copy_of(reference), (X,), memory_limit=0.8, reuse_profile_of=profiled)
    small = X[:3].contiguous()
    with pytest.warns(UserWarning, match="differ from the planned"):
        out_b, grads_b, _ = step(rewritten, small)
    out_a, grads_a, _ = step(reference, small)
    assert torch.equal(out_a, out_b)
    for name in grads_a:
        assert torch.equal(grads_a[name], grads_b[name]), name


def assert_trains_within(rewritten, x, limit):
    """One step of `rewritten` on `x` is bit for bit the unmodified model's, its peak within `limit`."""
    with jitckpt.cpu_memory() as memory:
        out_b, grads_b, _ = step(rewritten, x, seed=2)
    peak = memory.peak + families.caller_held_bytes(rewritten, (x,))
    loss_bytes = families.loss_held_bytes(out_b, lambda o: o.pow(2).mean())
    assert peak <= limit + loss_bytes + families.OUTSIDE_CHAIN_BYTES, (peak, limit, loss_bytes)
    out_a, grads_a, _ = step(scripted(), x, seed=2)
    assert torch.equal(out_a, out_b) and all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)


def test_a_larger_batch_that_a_bytes_limit_cannot_hold_runs_at_its_smallest_with_a_warning(profiled):
    """Training does not stop at a shape the limit cannot hold: that shape gets its smallest."""
    limit = jitckpt.plan(jitckpt.checkpoint(scripted(), (X,), memory_limit=0.8, reuse_profile_of=profiled))["memory_limit"]
    rewritten = jitckpt.checkpoint(scripted(), (X,), memory_limit=limit, reuse_profile_of=profiled)
    large = torch.randn(64, 3, 16, 16)
    with pytest.warns(UserWarning, match=r"no schedule fits the memory limit .* for inputs \[\[64, 3, 16, 16\] "
                                         r"Float@cpu.*run at their smallest limit"):
        step(rewritten, large)
    info = jitckpt.plan(rewritten)  # the plan the last call ran
    assert info["input_shapes"][0] == [64, 3, 16, 16] and info["over_limit"]
    assert info["memory_limit"] == info["predicted_peak"] > limit
    assert_trains_within(rewritten, large, info["memory_limit"])
    # The planned shape still trains exactly, within its own limit.
    assert_trains_within(rewritten, X, limit)
    assert not jitckpt.plan(rewritten)["over_limit"]


def test_a_smaller_batch_keeps_the_budget_a_fraction_meant_at_the_larger(profiled):
    """A fraction is a budget in bytes once planned: a smaller batch, whose parameter gradients weigh
    more against its activations, is held to the larger batch's bytes, not to the fraction of its
    own peak, which no schedule may fit."""
    one = X[:1].contiguous()
    smallest_of_one = jitckpt.plan(jitckpt.checkpoint(scripted(), (one,), memory_limit="min", profile_repeats=1))
    smallest_of_four = jitckpt.plan(jitckpt.checkpoint(scripted(), (X,), memory_limit="min", reuse_profile_of=profiled))
    # Below batch 1's smallest fraction where batch 4 allows it (1.13), else batch 4's smallest (2.14).
    fraction = max(0.95 * smallest_of_one["memory_limit"] / smallest_of_one["unconstrained_peak"],
                   1.001 * smallest_of_four["memory_limit"] / smallest_of_four["unconstrained_peak"])
    rewritten = jitckpt.checkpoint(scripted(), (X,), memory_limit=fraction, reuse_profile_of=profiled)
    planned = jitckpt.plan(rewritten)["memory_limit"]
    assert planned < jitckpt.plan(profiled)["unconstrained_peak"]
    with pytest.warns(UserWarning, match="differ from the planned") as caught:
        step(rewritten, one)
    assert not any("no schedule fits" in str(w.message) for w in caught)
    info = jitckpt.plan(rewritten)
    assert info["input_shapes"][0] == [1, 3, 16, 16] and not info["over_limit"]
    assert info["memory_limit"] == planned > int(fraction * info["unconstrained_peak"])
    assert_trains_within(rewritten, one, planned)


def test_a_fraction_stays_a_fraction_of_a_new_shapes_peak(profiled):
    reference = scripted()
    rewritten = jitckpt.checkpoint(copy_of(reference), (X,), memory_limit=0.8, reuse_profile_of=profiled)
    large = torch.randn(64, 3, 16, 16)
    with pytest.warns(UserWarning, match="differ from the planned"):
        step(rewritten, large)  # plans for the new shape; .grad allocated
    (variant,) = jitckpt.plan(rewritten)["variants"]
    assert variant["input_shapes"][0] == [64, 3, 16, 16]
    assert variant["memory_limit"] == int(0.8 * variant["unconstrained_peak"])
    with jitckpt.cpu_memory() as memory:
        out_b, grads_b, _ = step(rewritten, large, seed=2)
    peak = memory.peak + families.caller_held_bytes(rewritten, (large,))
    loss_bytes = families.loss_held_bytes(out_b, lambda o: o.pow(2).mean())
    assert peak <= variant["memory_limit"] + loss_bytes + families.OUTSIDE_CHAIN_BYTES, (peak, variant["memory_limit"], loss_bytes)
    out_a, grads_a, _ = step(reference, large, seed=2)
    assert torch.equal(out_a, out_b) and all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)


def test_a_new_dtype_after_planning_is_planned_for(profiled):
    """model.double() after planning: the float plan's costs and limit do not hold for doubles."""
    reference = scripted().double()
    rewritten = jitckpt.checkpoint(scripted(), (X,), memory_limit=0.9, reuse_profile_of=profiled).double()
    planned_peak = jitckpt.plan(rewritten)["unconstrained_peak"]  # for floats: no call ran yet
    with pytest.warns(UserWarning, match=r"Double@cpu.*differ from the planned"):
        out_b, grads_b, _ = step(rewritten, X.double())
    (variant,) = jitckpt.plan(rewritten)["variants"]
    assert variant["input_types"][0] == "Double@cpu" and "Double@cpu" in variant["input_types"][-1]
    assert variant["unconstrained_peak"] > 1.5 * planned_peak
    out_a, grads_a, _ = step(reference, X.double())
    assert torch.equal(out_a, out_b) and all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)




class WritesItsInput(nn.Module):
    """forward scales its input in place, then a chain of layers."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(4)])

    def forward(self, x):
        x.mul_(2.0)
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


class WritesAnInputInAList(WritesItsInput):
    """The same, on a tensor taken out of a list input."""

    def forward(self, xs: List[torch.Tensor]):
        x = xs[0]
        x.add_(1.0)
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


class WritesItsInputLater(nn.Module):
    """forward reads its input in every block and scales it in place after the third."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(5)])

    def forward(self, x):
        h = x + 1
        for i, layer in enumerate(self.layers):
            h = torch.tanh(layer(h)) + x
            if i == 2:
                x.mul_(2.0)
        return h


def writer_and_inputs(model):
    """make() scripts `model` with the same weights each time; wrap(x) is its arguments for x."""
    def make():
        torch.manual_seed(0)
        return torch.jit.script(model().train())

    def wrap(x):
        return ([x],) if model is WritesAnInputInAList else (x,)

    return make, wrap


@pytest.mark.parametrize("model", [WritesItsInput, WritesAnInputInAList])
def test_planning_leaves_the_example_inputs_that_forward_writes_as_they_were(model):
    make, wrap = writer_and_inputs(model)
    x = torch.randn(1024, 16)
    example = x.clone()
    rewritten = jitckpt.checkpoint(make(), wrap(example), memory_limit="min", profile_repeats=1)
    assert torch.equal(example, x), "planning wrote into the caller's example input"
    assert jitckpt.plan(rewritten)["num_stages"] >= 3
    mine, theirs = x.clone(), x.clone()
    with torch.jit.optimized_execution(False):
        out_a = make()(*wrap(theirs))
        out_b = rewritten(*wrap(mine))
    assert torch.equal(out_a, out_b)


@pytest.mark.parametrize("model", [WritesItsInput, WritesAnInputInAList, WritesItsInputLater])
def test_a_stage_that_writes_forwards_input_is_named_and_exact(model):
    """A stage runs on a copy of the input it writes, so the caller's tensor is left as it was: a
    warning names the stage (also a later one, where the input is carried to it); outputs and
    gradients stay the unmodified model's."""
    make, wrap = writer_and_inputs(model)
    x = torch.randn(1024, 16)
    stage = "[2-9]" if model is WritesItsInputLater else "1"
    with pytest.warns(UserWarning, match=f"forward writes its input in place in the chain's stage {stage}:"):
        rewritten = jitckpt.checkpoint(make(), wrap(x.clone()), memory_limit="min", profile_repeats=1)
    reference = make()
    theirs, mine = x.clone(), x.clone()
    with torch.jit.optimized_execution(False):
        out_a, out_b = reference(*wrap(theirs)), rewritten(*wrap(mine))
        out_a.square().mean().backward()
        out_b.square().mean().backward()
    assert torch.equal(out_a, out_b)
    assert not torch.equal(theirs, x) and torch.equal(mine, x), "the warning says the caller's tensor stays"
    for (name, a), (_, b) in zip(reference.named_parameters(), rewritten.named_parameters()):
        assert torch.equal(a.grad, b.grad), name


class NoGradBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.frozen = nn.Linear(16, 16), nn.Linear(16, 16)
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(3)])

    def forward(self, x):
        x = torch.tanh(self.first(x))
        with torch.no_grad():
            x = torch.tanh(self.frozen(x))
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


@pytest.mark.parametrize("with_inputs", [True, False])
def test_a_with_block_in_forward_is_a_clear_error_on_both_paths(with_inputs):
    model = torch.jit.script(NoGradBlock().train())
    args = ((torch.randn(8, 16),),) if with_inputs else ()
    with pytest.raises(RuntimeError, match=r"forward runs a `with` block \(.*no_grad\) at .*test_checkpoint.py:\d+"
                                           r"(.|\n)*\.detach\(\)"):
        jitckpt.checkpoint(model, *args, memory_limit=0.5)
    assert not hasattr(model, "_jitckpt_plan")  # nothing was changed on the module


class TwoLSTMs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.LSTM(4, 8, batch_first=True), nn.LSTM(8, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.b(self.a(x)[0])[0])


@pytest.mark.parametrize("strategy", ["optimal", "periodic", "revolve", "none"])
def test_no_limit_plans_every_strategy_even_where_it_needs_more_than_no_checkpointing(strategy):
    """On this short chain (PyTorch 1.13's sizes) every revolve-style schedule holds more than no
    checkpointing does (a checkpoint beside each recorded stage): without a limit it takes its
    smallest (it was refused: 10788 bytes against 10496)."""
    def make():
        torch.manual_seed(0)
        return torch.jit.script(TwoLSTMs())

    x = torch.randn(2, 5, 4)
    rewritten = jitckpt.checkpoint(make(), (x,), memory_limit=None, strategy=strategy, profile_repeats=1)
    plan = jitckpt.plan(rewritten)
    assert plan["num_stages"] == 3 and plan["predicted_peak"] <= plan["memory_limit"]
    reference = make()
    with torch.jit.optimized_execution(False):
        for model in (reference, rewritten):
            model(x).square().sum().backward()
    for (name, a), (_, b) in zip(reference.named_parameters(), rewritten.named_parameters()):
        assert torch.equal(a.grad, b.grad), name


class WithDefaults(nn.Module):
    """Forward with arguments after the input that have defaults (a scale, an optional mask)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x, y, scale: float = 2.0, mask: Optional[torch.Tensor] = None):
        for layer in self.layers:
            x = torch.relu(layer(x)) * scale + y
            if mask is not None:
                x = x * mask
        return x


def test_example_inputs_may_leave_out_arguments_with_defaults():
    """model(x, y) runs forward with scale 2.0 and no mask: so do planning on (x, y) and the rewrite
    (it failed: forward takes 4 inputs but 2 were given). An argument without a default left out is
    an error that names it."""
    x, y = torch.randn(4, 8), torch.randn(8)

    def make():
        torch.manual_seed(0)
        return torch.jit.script(WithDefaults())

    assert jitckpt.partition(make(), (x, y))["num_stages"] == 4
    model, reference = jitckpt.checkpoint(make(), (x, y), memory_limit="min"), make()
    assert jitckpt.plan(model)["num_stages"] == 4
    for m in (model, reference):
        m(x, y).pow(2).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad), name
    with pytest.raises(RuntimeError, match="argument 'y' has no default, but the example inputs stop before it"):
        jitckpt.checkpoint(make(), (x,), memory_limit="min")
    with pytest.raises(RuntimeError, match="forward takes 4 input"):
        jitckpt.checkpoint(make(), (x, y, 1.0, None, 2), memory_limit="min")


@pytest.mark.skipif(jitckpt.export.available(), reason="this PyTorch captures with torch.export")
def test_export_on_a_pytorch_without_it_says_which_is_needed():
    with pytest.raises(RuntimeError, match=r"front_end='export' needs PyTorch 2.6 or later \(this is 1\."):
        jitckpt.checkpoint(nn.Linear(2, 2), front_end="export")
    assert isinstance(jitckpt.checkpoint(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))), torch.jit.ScriptModule)
