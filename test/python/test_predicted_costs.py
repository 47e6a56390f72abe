"""Batches of varying length: after profiles at four lengths of one chain, a length between them, or
beyond them by at most their span, is planned from costs predicted from those profiles, without
profiling (solver/cost_fit.h). The predicted byte counts are the ones a profile measures, and a step
there is the unmodified model's, bit for bit, within its limit."""
import copy
import warnings
from typing import List

import pytest
import torch

import jitckpt
from jitckpt.export import capture

import families
from test_eager_modules import ReverseGradient

PROFILED = [16, 48, 24, 40]  # the first call cuts the chain; every length then keeps that cut
BETWEEN, BEYOND = 32, 56  # 56: beyond the profiled lengths by less than their span (32)
EXACT = ["wa", "wabar", "wd", "wg", "wd_handed", "spans", "held_output"]  # tensors: sizes of the shapes
OVERHEADS = ["of", "of_nograd", "ob"]  # also kernels' workspaces, which a threshold may choose


def tokens(length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 64, (2, length), generator=torch.Generator().manual_seed(seed))


def step(model, idx):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    with torch.jit.optimized_execution(False), jitckpt.cpu_memory() as memory:
        output = model(idx)
        families.loss_of(output).backward()
    return output.detach(), [p.grad.clone() for p in model.parameters()], memory.peak


def train(model, lengths):
    return [step(model, tokens(t, seed)) for seed, t in enumerate(lengths)]


@pytest.mark.parametrize("limit,predicted", [("min", BETWEEN), (0.6, BETWEEN), ("min", BEYOND), (0.6, BEYOND)])
def test_a_length_near_profiled_ones_is_planned_from_predicted_costs(limit, predicted):
    family = families.llama("test")
    lengths = PROFILED + [predicted]
    first, second = train(family.make(0), lengths), train(family.make(0), lengths)
    for (out_a, grads_a, _), (out_b, grads_b, _) in zip(first, second):  # the reference repeats itself
        assert torch.equal(out_a, out_b) and all(torch.equal(a, b) for a, b in zip(grads_a, grads_b))

    model = jitckpt.checkpoint(family.make(0), memory_limit=limit, profile_repeats=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        steps = train(model, lengths)
    for t, (out_a, grads_a, _), (out_b, grads_b, _) in zip(lengths, first, steps):
        assert torch.equal(out_a, out_b), t
        assert all(torch.equal(a, b) for a, b in zip(grads_a, grads_b)), t
    info = jitckpt.plan(model)
    assert info["input_shapes"][0][:2] == [2, predicted] and info["predicted_costs"]
    assert info["num_stages"] > 2
    assert sum(v["predicted_costs"] for v in info["variants"]) == 1
    # Within the limit of the plan it ran.
    idx = tokens(predicted, len(lengths) - 1)
    output, _, peak = step(model, idx)
    loss_bytes = families.loss_held_bytes(output, families.loss_of)  # the caller's, outside the limit
    assert peak + families.caller_held_bytes(model, (idx,)) <= info["memory_limit"] + loss_bytes + \
        families.OUTSIDE_CHAIN_BYTES

    # The sizes predicted are those a profile of that length measures, on the same cut; the
    # overheads at least those (an embedding's backward takes a workspace that falls with the
    # length: bounded by the largest sampled).
    profiled = jitckpt.checkpoint(family.make(0), memory_limit=limit, profile_repeats=1)
    train(profiled, [PROFILED[0], predicted])
    measured = jitckpt.plan(profiled)
    assert not measured["predicted_costs"] and measured["labels"] == info["labels"]
    for field in EXACT:
        assert measured["costs"][field] == info["costs"][field], field
    for field in OVERHEADS:
        assert all(p >= m for p, m in zip(info["costs"][field], measured["costs"][field])), field


def test_a_length_beyond_the_profiled_ones_by_more_than_their_span_is_profiled():
    family = families.llama("test")
    model = jitckpt.checkpoint(family.make(0), memory_limit="min", profile_repeats=1)
    train(model, PROFILED + [88])
    info = jitckpt.plan(model)
    assert info["input_shapes"][0][:2] == [2, 88] and not info["predicted_costs"]


def inputs_at(family, length: int, seed: int):
    """The family's token inputs at another sequence length: every dim of the original length."""
    base = family.inputs[0].shape[1]
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, int(t.max()) + 1, [length if d == base else d for d in t.shape], generator=g)
                 for t in family.inputs)


def every_length(family) -> List[int]:
    """The family's own length (no longer: learned position tables), three more to profile, then one
    between profiled ones and one below them."""
    base = family.inputs[0].shape[1]
    return [base, base // 4, base * 3 // 4, base // 2, base * 5 // 8, base // 8]


def run_at(family, model, lengths):
    """A step at each length: its output and gradients, its peak, its inputs and its output."""
    results = []
    for seed, length in enumerate(lengths):
        inputs = inputs_at(family, length, seed)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(seed)
        with torch.jit.optimized_execution(False), jitckpt.cpu_memory() as memory:
            output = model(*inputs)
            family.loss(output).backward()
        results.append((families.tensors_of(output), [p.grad.clone() for p in model.parameters()],
                        memory.peak, inputs, output))
    return results


def caller_held_bytes(model, inputs) -> int:
    """families.caller_held_bytes of a scripted model's rewrite, or of a capture's."""
    if isinstance(model, jitckpt.CheckpointedModule):
        flat = capture.flatten(inputs, {})[0]
        return families.caller_held_bytes(model.rewritten, tuple(capture.arguments(model._captures[0][0], flat)))
    return families.caller_held_bytes(model, inputs)


def assert_every_length_exact_within_its_limit(family, reference, model):
    """The model trained at every_length as the reference, twice first (it must repeat itself),
    each step within the limit of the plan it ran."""
    lengths = every_length(family)
    first, second = run_at(family, reference(), lengths), run_at(family, reference(), lengths)
    for a, b in zip(first, second):
        assert all(torch.equal(x, y) for x, y in zip(a[0] + a[1], b[0] + b[1])), "the reference does not repeat"
    steps = run_at(family, model, lengths)
    for length, a, b in zip(lengths, first, steps):
        assert all(torch.equal(x, y) for x, y in zip(a[0] + a[1], b[0] + b[1])), length
        info = next(v for v in [jitckpt.plan(model)] + jitckpt.plan(model)["variants"]
                    if v["input_shapes"][0][1] == length)
        peak = b[2] + caller_held_bytes(model, b[3])
        loss_bytes = families.loss_held_bytes(b[4], family.loss)
        allowed = info["memory_limit"] + loss_bytes + families.OUTSIDE_CHAIN_BYTES
        assert peak <= allowed, (length, peak, info["memory_limit"])


@pytest.mark.parametrize("name", ["gpt_mask_builtin", "bert_encoder", "lstm_stack", "gru", "llama"])
def test_every_length_trains_bit_for_bit_within_its_limit(name):
    family = families.FAMILIES[name]("test")
    model = jitckpt.checkpoint(family.make(0), memory_limit="min", profile_repeats=1)
    assert_every_length_exact_within_its_limit(family, lambda: family.make(0), model)


@pytest.mark.skipif(not capture.available(), reason="torch.export's training capture needs PyTorch 2.6")
@pytest.mark.parametrize("name", ["lstm_stack", "gru"])
def test_recurrent_layers_through_export_keep_one_capture_for_every_length(name):
    """Export records nn.LSTM and nn.GRU as one op each, with the length dynamic (recurrent_layers.py):
    one capture serves every length. The GRU's length between the profiled ones is planned from
    predicted costs; 2.x's LSTM kernel (oneDNN) keeps a workspace that no quadratic in the length
    gives, so that most lengths of the LSTM are profiled, on the same capture."""
    family = families.FAMILIES[name]("test")
    model = jitckpt.checkpoint(family.eager(0), memory_limit="min", profile_repeats=1)
    assert isinstance(model, jitckpt.CheckpointedModule)
    assert_every_length_exact_within_its_limit(family, lambda: family.eager(0), model)
    assert len(model._captures) == 1
    if name == "gru":  # between the profiled lengths; the shortest is profiled (an overhead grows with the length)
        assert sum(v["predicted_costs"] for v in jitckpt.plan(model)["variants"]) >= 1


class RecurrentThenFunction(torch.nn.Module):
    """A torch.autograd.Function of the model's own applied to a recurrent layer's output: export
    keeps it whole only where that output needs a gradient while it is captured."""

    def __init__(self, layer: type):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 8)
        self.rnn = layer(8, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(ReverseGradient.apply(self.rnn(self.embed(tokens))[0]).mean(1))


@pytest.mark.skipif(not capture.available(), reason="torch.export's training capture needs PyTorch 2.6")
@pytest.mark.parametrize("layer", [torch.nn.LSTM, torch.nn.GRU])
def test_a_function_applied_to_a_recurrent_layer_keeps_its_backward(layer):
    torch.manual_seed(0)
    reference = RecurrentThenFunction(layer)
    model = copy.deepcopy(reference)
    checkpointed = jitckpt.checkpoint(model, memory_limit="min", profile_repeats=1)
    for seed, length in enumerate((16, 4, 12)):
        for m in (reference, model):
            m.zero_grad(set_to_none=True)
        reference(tokens(length, seed)).sum().backward()
        checkpointed(tokens(length, seed)).sum().backward()
        for (name, a), b in zip(model.named_parameters(), reference.parameters()):
            assert torch.equal(a.grad, b.grad), (length, name)
    assert len(checkpointed._captures) == 1
