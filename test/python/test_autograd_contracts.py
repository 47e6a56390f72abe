"""Gradients reach autograd as the unmodified model's do (issue: exact or refused, point 2):
torch.autograd.grad on parameters and inputs (with and without allow_unused) gives the same
tensors and leaves .grad alone; backward(inputs=...) fills only those; hooks on parameters fire
once with the same gradient; gradients accumulate into existing .grad in the same order;
retain_graph=True gives the same results; create_graph=True is refused clearly. Each is
checked bit for bit against the unmodified model (run with optimized_execution(False)) at the
smallest limit that works, on several model families and on a model whose parameters are tied
across stages."""
import os
import sys
import warnings
from typing import Callable, List, Tuple

import pytest
import torch
from torch import Tensor, nn

import jitckpt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

import families  # noqa: E402
from smallest_limit import at_smallest_limit  # noqa: E402


class TiedBlocks(nn.Module):
    """One projection applied by every block (ALBERT-style sharing), an embedding tied to the
    output layer, and a parameter no path reaches."""

    def __init__(self, vocab: int = 13, width: int = 16, blocks: int = 5, with_unused: bool = True):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.shared = nn.Linear(width, width)
        self.norms = nn.ModuleList([nn.LayerNorm(width) for _ in range(blocks)])
        self.out = nn.Linear(width, vocab, bias=False)
        self.out.weight = self.embed.weight
        if with_unused:
            self.unused = nn.Parameter(torch.ones(3))

    def forward(self, tokens: Tensor, scale: Tensor) -> Tensor:
        x = self.embed(tokens) * scale
        for norm in self.norms:
            x = x + torch.tanh(self.shared(norm(x)))
        return self.out(x)


def tied_family(with_unused: bool = True) -> families.Family:
    g = torch.Generator().manual_seed(7)
    inputs = (torch.randint(0, 13, (4, 6), generator=g), torch.rand(4, 6, 1, generator=g) + 0.5)

    def eager(seed: int = 0) -> torch.nn.Module:
        torch.manual_seed(seed)
        return TiedBlocks(with_unused=with_unused).train()

    def make(seed: int = 0) -> torch.jit.ScriptModule:
        return torch.jit.script(eager(seed))
    return families.Family("tied_blocks", make, inputs, 5, eager=eager)


FAMILY_MAKERS: List[Callable[[], families.Family]] = [
    tied_family,
    lambda: families.gpt_mask_input("test"),
    lambda: families.two_input("test"),
    lambda: families.lstm_stack("test"),
    lambda: families.dict_output("test"),
]


@pytest.fixture(scope="module", params=range(len(FAMILY_MAKERS)),
                ids=["tied_blocks", "gpt_mask_input", "two_input", "lstm_stack", "dict_output"])
def family(request) -> families.Family:
    return FAMILY_MAKERS[request.param]()


@pytest.fixture(scope="module")
def profiled(family):
    return jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None, profile_repeats=1)


@pytest.fixture(scope="module", params=["min", None], ids=["at_min", "no_limit"])
def rewritten_factory(request, family, profiled):
    """Makes fresh rewrites of make(0) at the smallest limit that works, which recomputes, and
    with no limit, whose chain records the model's own graph (one profile for all)."""
    if request.param == "min":
        return lambda: at_smallest_limit(family.make, family.inputs, profiled)
    return lambda: jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None,
                                      reuse_profile_of=profiled)


def recomputes(model) -> bool:
    schedule = jitckpt.plan(model)["schedule"]
    return "Fck(" in schedule or "Fn(" in schedule


def float_inputs(family: families.Family) -> List[Tensor]:
    """Fresh copies of the inputs; the floating ones require grad."""
    return [t.detach().clone().requires_grad_(t.is_floating_point()) for t in family.inputs]


def forward_loss(model, family: families.Family, inputs: List[Tensor], seed: int = 0) -> Tensor:
    torch.manual_seed(seed)  # dropout
    return family.loss(model(*inputs))


def parameters(model) -> List[Tensor]:
    return [p for _, p in sorted(model.named_parameters())]


def assert_equal_lists(what: str, a: List, b: List) -> None:
    assert len(a) == len(b), what
    for i, (x, y) in enumerate(zip(a, b)):
        assert (x is None) == (y is None), f"{what} {i}: {x is None} against {y is None}"
        if x is not None:
            assert x.shape == y.shape and torch.equal(x, y), \
                f"{what} {i}: max abs difference {(x.double() - y.double()).abs().max().item():.3g}"


def grads_of(model) -> List:
    return [None if p.grad is None else p.grad.clone() for p in parameters(model)]


def both(family, rewritten_factory):
    return family.make(0), rewritten_factory()


def test_autograd_grad_on_parameters_and_inputs_leaves_grad_alone(family, rewritten_factory):
    for model in both(family, rewritten_factory):
        model.zero_grad(set_to_none=True)
    results = []
    with torch.jit.optimized_execution(False):
        for model in both(family, rewritten_factory):
            inputs = float_inputs(family)
            wrt = parameters(model) + [t for t in inputs if t.requires_grad]
            loss = forward_loss(model, family, inputs)
            results.append((torch.autograd.grad(loss, wrt, allow_unused=True), grads_of(model)))
    (reference, reference_grads), (ours, our_grads) = results
    assert_equal_lists(f"{family.name}: autograd.grad", list(reference), list(ours))
    assert all(g is None for g in our_grads), f"{family.name}: torch.autograd.grad wrote .grad"
    assert all(g is None for g in reference_grads)


def test_autograd_grad_without_allow_unused(family, rewritten_factory):
    results = []
    with torch.jit.optimized_execution(False):
        for model in both(family, rewritten_factory):
            used = [p for n, p in sorted(model.named_parameters()) if n != "unused"]
            results.append(list(torch.autograd.grad(forward_loss(model, family, float_inputs(family)), used)))
    assert_equal_lists(f"{family.name}: autograd.grad", *results)


def test_backward_with_inputs_fills_only_those(family, rewritten_factory):
    results = []
    with torch.jit.optimized_execution(False):
        for model in both(family, rewritten_factory):
            chosen = parameters(model)[::2]
            forward_loss(model, family, float_inputs(family)).backward(inputs=chosen)
            results.append(grads_of(model))
    assert_equal_lists(f"{family.name}: backward(inputs=)", *results)
    assert any(g is None for g in results[1]) and any(g is not None for g in results[1])


def test_hooks_fire_once_with_the_same_gradient(family, rewritten_factory):
    results = []
    with torch.jit.optimized_execution(False):
        for model in both(family, rewritten_factory):
            seen = {}
            for i, p in enumerate(parameters(model)):
                p.register_hook(lambda g, i=i: seen.setdefault(i, []).append(g.clone()))
            forward_loss(model, family, float_inputs(family)).backward()
            results.append(seen)
    reference, ours = results
    assert sorted(reference) == sorted(ours), f"{family.name}: hooks fired for other parameters"
    for i in reference:
        assert len(ours[i]) == len(reference[i]), f"{family.name}: parameter {i}'s hook fired {len(ours[i])} times"
        assert_equal_lists(f"{family.name}: hook of parameter {i}", reference[i], ours[i])


def test_gradients_accumulate_like_the_model(family, rewritten_factory):
    """Three backward passes into existing .grad, without zeroing: the same sums in the same order."""
    results = []
    with torch.jit.optimized_execution(False):
        for model in both(family, rewritten_factory):
            for seed in range(3):
                forward_loss(model, family, float_inputs(family), seed).backward()
            results.append(grads_of(model))
    assert_equal_lists(f"{family.name}: accumulated .grad", *results)


def test_create_graph_is_refused_and_the_module_stays_exact(family, rewritten_factory):
    """A gradient penalty through recomputation cannot carry the unmodified model's graph: a clear
    error, no gradient that silently lost requires_grad, nothing written, and the next step exact.
    Without recomputation the chain's graph is the model's, and the penalty's gradients are the
    unmodified model's."""
    reference, model = both(family, rewritten_factory)
    used = [p for n, p in sorted(model.named_parameters()) if n != "unused"]
    if not recomputes(model):
        results = []
        with torch.jit.optimized_execution(False):
            for m in (reference, model):
                weights = [p for n, p in sorted(m.named_parameters()) if n != "unused"]
                grads = torch.autograd.grad(forward_loss(m, family, float_inputs(family)), weights,
                                            create_graph=True)
                sum(g.square().sum() for g in grads).backward()
                results.append(grads_of(m))
        assert_equal_lists(f"{family.name}: a gradient penalty", *results)
        return
    with pytest.raises(RuntimeError, match="create_graph=True .* is not supported"):
        torch.autograd.grad(forward_loss(model, family, float_inputs(family)), used, create_graph=True)
    assert all(p.grad is None for p in used)
    results = []
    with torch.jit.optimized_execution(False):
        for m in (reference, model):
            forward_loss(m, family, float_inputs(family), seed=1).backward()
            results.append(grads_of(m))
    assert_equal_lists(f"{family.name}: the step after a refused create_graph", *results)


def test_two_forward_calls_before_one_backward(family, rewritten_factory):
    """A siamese loss: two calls, then one backward. Without recomputation each call records the
    model's own graph, and the gradients are the model's bit for bit; where the chain recomputes,
    each call's gradients are added apart, which rounds otherwise in the last bits
    (docs/supported.md)."""
    reference, model = both(family, rewritten_factory)
    results = []
    with torch.jit.optimized_execution(False):
        for m in (reference, model):
            first = forward_loss(m, family, float_inputs(family), seed=0)
            second = forward_loss(m, family, float_inputs(family), seed=1)
            (first + second).backward()
            results.append(grads_of(m))
    if not recomputes(model):
        assert_equal_lists(f"{family.name}: two calls, one backward", *results)
        return
    for i, (x, y) in enumerate(zip(*results)):
        assert (x is None) == (y is None), i
        if x is not None:
            assert torch.allclose(x, y, rtol=1e-4, atol=1e-6), f"{family.name} {i}"


def test_retain_graph_backward_twice(family, rewritten_factory):
    results = []
    with torch.jit.optimized_execution(False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model in both(family, rewritten_factory):
            loss = forward_loss(model, family, float_inputs(family))
            loss.backward(retain_graph=True)
            loss.backward()
            results.append(grads_of(model))
    assert_equal_lists(f"{family.name}: retain_graph", *results)


def test_second_backward_without_retain_graph_is_refused(family, rewritten_factory):
    model = rewritten_factory()
    loss = forward_loss(model, family, float_inputs(family))
    loss.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        loss.backward()


@pytest.mark.parametrize("retain_graph", [False, True])
@pytest.mark.parametrize("name", ["two_input", "dict_output", "list_output"])
def test_backward_through_one_output_gives_the_others_parameters_no_gradient(name, retain_graph):
    """A loss that reads one output only: parameters that only the other outputs read keep .grad
    None, as in the unmodified model (zeros would let weight decay move them), on both backward
    paths (retain_graph=True differentiates the chain whole)."""
    family = families.FAMILIES[name]("test")
    profiled = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None, profile_repeats=1)
    rewritten = at_smallest_limit(family.make, family.inputs, profiled)
    reference = family.make(0)
    with torch.no_grad():
        outputs = len(families.tensors_of(reference(*family.inputs)))
    assert outputs >= 2, f"{name} has {outputs} output tensor"
    some_none = False
    for index in range(outputs):
        results = []
        with torch.jit.optimized_execution(False), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # retain_graph's warning
            for model in (reference, rewritten):
                model.zero_grad(set_to_none=True)
                torch.manual_seed(0)  # dropout
                chosen = families.tensors_of(model(*family.inputs))[index]
                chosen.pow(2).sum().backward(retain_graph=retain_graph)
                results.append(grads_of(model))
        assert_equal_lists(f"{name}: backward through output {index}", *results)
        some_none = some_none or any(g is None for g in results[0])
    assert some_none, f"{name}: every output reaches every parameter; the test checks nothing"


class FeaturesAndLogits(nn.Module):
    """Returns its features beside the head's logits: the head, inside the chain, reads them too."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])
        self.head = nn.Linear(8, 3)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
        return self.head(x), x


def test_a_hook_on_a_returned_tensor_that_the_chain_reads_further_is_warned_about():
    """Where the schedule recomputes, a hook or retain_grad() on the returned features sees only
    the caller's part of their gradient (the head's part is added inside the chain's backward): a
    warning says so. A hook on the logits, which nothing in the chain reads, sees its whole
    gradient: no warning, and the parameters' gradients are those of the unmodified model. With no
    recomputation the chain's graph is the model's own: retain_grad() on the features sees their
    whole gradient, the unmodified model's, and nothing warns."""
    def make(seed: int = 0):
        torch.manual_seed(seed)
        return torch.jit.script(FeaturesAndLogits())

    x = torch.randn(5, 8)
    profiled = jitckpt.checkpoint(make(), (x,), memory_limit=None, profile_repeats=1)
    assert jitckpt.plan(profiled)["num_stages"] >= 4
    recomputing = at_smallest_limit(make, (x,), profiled)
    assert "Fck(" in jitckpt.plan(recomputing)["schedule"] or "Fn(" in jitckpt.plan(recomputing)["schedule"]
    reference = make()
    results = []
    for model in (reference, recomputing):
        with torch.jit.optimized_execution(False), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            logits, features = model(x)
            logits.register_hook(lambda g: g * 2)
            (logits.square().sum() + features.square().sum()).backward()
        assert not [w for w in caught if "retain_grad" in str(w.message)], [str(w.message) for w in caught]
        results.append(grads_of(model))
    assert_equal_lists("hook on the logits", *results)

    def features_grad(model):
        with torch.jit.optimized_execution(False), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            logits, features = model(x)
            features.retain_grad()
            (logits.square().sum() + features.square().sum()).backward()
        return features.grad, [str(w.message) for w in caught]

    _, caught = features_grad(recomputing)
    assert any("later layers also read" in w for w in caught), caught
    whole, caught = features_grad(profiled)
    assert not [w for w in caught if "retain_grad" in w], caught
    assert torch.equal(whole, features_grad(make())[0])


def test_autocast_forward_then_backward_outside_it(family, rewritten_factory):
    """Forward under torch.autocast (CPU, bfloat16), backward outside it, as training loops do:
    the recomputations in the backward run under the forward's autocast state, as
    torch.utils.checkpoint's do, so gradients match the model's bit for bit. Except
    (docs/supported.md) those of a weight that several stages share: the model casts it once per
    forward and sums its uses' gradients in bfloat16, jitckpt casts it once per stage and sums them
    in float32."""
    results = []
    for model in both(family, rewritten_factory):
        inputs = float_inputs(family)
        with torch.jit.optimized_execution(False):
            torch.manual_seed(0)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                output = model(*inputs)
            family.loss(output).float().backward()
        names = [n for n, _ in sorted(model.named_parameters())]
        results.append((grads_of(model), [t.grad for t in inputs]))
    shared = {"shared.weight", "shared.bias", "embed.weight"} if family.name == "tied_blocks" else set()
    exact = [i for i, n in enumerate(names) if n not in shared]
    assert_equal_lists("parameter gradient", [results[0][0][i] for i in exact], [results[1][0][i] for i in exact])
    for i, n in enumerate(names):
        if n in shared:
            assert torch.allclose(results[0][0][i], results[1][0][i], rtol=0.05, atol=0.05), n
    if not shared:
        assert_equal_lists("input gradient", results[0][1], results[1][1])


class DetachedOutputs(nn.Module):
    """Returns a hidden state beside two tensors detached inside forward (features for a memory
    bank, a target for a self-distillation loss)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(5)])

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x, x.detach(), x.detach() * 2


def test_outputs_detached_inside_forward_do_not_require_grad():
    """As in the model: requires_grad False and no grad_fn, so a backward through one alone is the
    model's error, not a silent no-op; the other output trains bit for bit."""
    def make():
        torch.manual_seed(0)
        return torch.jit.script(DetachedOutputs())
    x = torch.randn(64, 16)
    rewritten = jitckpt.checkpoint(make(), (x,), memory_limit="min", profile_repeats=1)
    assert jitckpt.plan(rewritten)["num_stages"] >= 3
    reference = make()
    with torch.jit.optimized_execution(False):
        expected, got = reference(x), rewritten(x)
        assert [t.requires_grad for t in got] == [t.requires_grad for t in expected] == [True, False, False]
        assert got[1].grad_fn is None and got[2].grad_fn is None
        with pytest.raises(RuntimeError, match="does not require grad"):
            got[2].sum().backward()
        for outputs, model in ((expected, reference), (got, rewritten)):
            (outputs[0].square().sum() + outputs[2].sum()).backward()
    assert_equal_lists("parameter gradient", grads_of(reference), grads_of(rewritten))
