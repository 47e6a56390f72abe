"""Rewrite now, plan later: jitckpt.checkpoint without example inputs plans at the first training
call for that call's inputs, once per new input key; "min" and "auto" limits; jitckpt.strip; the
graph-level _jit_pass_* functions. Every model family of test/models/families.py at its "test" size."""
import copy
import os
import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

import jitckpt

import families
from test_model_families import FRESH_PROCESS_TRAINING, assert_same_training, train, train_step

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "models")


@pytest.fixture(scope="module", params=list(families.FAMILIES))
def family(request) -> families.Family:
    return families.FAMILIES[request.param]("test")


@pytest.fixture(autouse=True)
def measured_memory():
    yield
    jitckpt._C.set_available_memory_for_testing(-1)


def test_first_training_call_plans_and_trains_bit_identically(family):
    """Rewritten without inputs at "min": nothing is planned until the first training call (a
    no-grad call does not plan), which plans once for its inputs; training is bit-identical to the
    unmodified model's."""
    model = jitckpt.checkpoint(family.make(0), memory_limit="min", profile_repeats=1)
    before = jitckpt.plan(model)
    assert before["deferred"] and "schedule" not in before and before["variants"] == []
    # Without inputs the rewrite cuts by tensor count, not bytes: every family keeps a stage per
    # block but the U-Net, whose encoder cuts each carry one skip more.
    least = 5 if family.name == "unet" else family.blocks
    assert before["num_stages"] >= least, f"{family.name}: {before['num_stages']} stages"
    model.eval()  # (a training-mode call would update BatchNorm statistics, as it would unmodified)
    with torch.no_grad():
        model(*family.inputs)
    model.train()
    assert jitckpt.plan(model)["variants"] == [], "a no-grad call planned"
    assert "planned at the first training call" in jitckpt.dump(model) and "schedule:" not in jitckpt.dump(model)
    assert_same_training(family.name, train(family.make(0), family), train(model, family))
    after = jitckpt.plan(model)
    # The first training call cut the chain again by the bytes of its tensors, as example inputs do
    # (several families get other stages so).
    assert after["labels"] == jitckpt.partition(family.make(0), family.inputs)["labels"], family.name
    assert "schedule:" in jitckpt.dump(model)
    assert len(after["variants"]) == 1 and after["schedule"].count("B(") == after["num_stages"] + 1
    # (equal where no schedule saves anything: on 2.x nn.TransformerEncoder's chain is its last block)
    assert after["memory_limit"] == after["predicted_peak"] <= after["unconstrained_peak"]


def test_each_new_input_key_plans_once():
    family = families.FAMILIES["gpt_mask_input"]("test")
    model = jitckpt.checkpoint(family.make(0), memory_limit=0.6)
    tokens, mask = family.inputs
    shorter = (tokens[:, : tokens.shape[1] // 2], mask[: mask.shape[0] // 2, : mask.shape[1] // 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deferred module plans without warning
        for inputs in (family.inputs, shorter, family.inputs, shorter):
            train_step(model, families.Family(family.name, family.make, inputs, family.blocks, family.loss,
                                              family.description), 0)
    variants = jitckpt.plan(model)["variants"]
    # (the chain's input is the embedded sequence: batch x length x width)
    assert sorted(v["input_shapes"][0][:2] for v in variants) == sorted([list(tokens.shape), list(shorter[0].shape)])
    # A fraction resolves to bytes on the largest shape planned so far: the full length first.
    full, short = sorted(variants, key=lambda v: -v["input_shapes"][0][1])
    assert full["memory_limit"] == int(0.6 * full["unconstrained_peak"])
    assert short["memory_limit"] == full["memory_limit"] > int(0.6 * short["unconstrained_peak"])
    # plan() shows the plan the last call ran.
    assert jitckpt.plan(model)["input_shapes"][0][:2] == list(shorter[0].shape)


def test_the_plans_of_many_shapes_are_bounded_and_a_dropped_one_is_made_again():
    torch.manual_seed(0)
    eager = nn.Sequential(*[layer for _ in range(6) for layer in (nn.Linear(64, 64), nn.Tanh())])
    reference = torch.jit.script(copy.deepcopy(eager))
    model = jitckpt.checkpoint(torch.jit.script(eager), memory_limit="min", profile_repeats=1)
    batches = list(range(1, 19))  # more shapes than the plans kept
    for batch in batches + [1]:
        x = torch.randn(batch, 64)
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
            with torch.jit.optimized_execution(False):  # as the unmodified model runs
                m(x).pow(2).sum().backward()
        for (name, a), b in zip(model.named_parameters(), reference.parameters()):
            assert torch.equal(a.grad, b.grad), (batch, name)
    info = jitckpt.plan(model)
    assert len(info["variants"]) == 16
    assert info["num_stages"] > 1 and info["input_shapes"][0] == [1, 64]  # dropped (least recently used), then made again
    assert sorted(v["input_shapes"][0][0] for v in info["variants"]) == [1] + list(range(4, 19))


def test_first_call_profiling_is_silent_off_a_terminal_unless_verbose(capfd):
    family = families.FAMILIES["two_input"]("test")
    train_step(jitckpt.checkpoint(family.make(0), memory_limit="min"), family, 0)
    assert capfd.readouterr().err == ""
    model = jitckpt.checkpoint(family.make(0), memory_limit="min", verbose=True)
    train_step(model, family, 0)
    stages = jitckpt.plan(model)["num_stages"]
    err = capfd.readouterr().err
    # (the per-stage lines come at most once a second; the summary always)
    assert f"{stages} stages" in err and "planned for inputs [[4, 3, 32, 32]" in err, err


def trained_in_a_fresh_process(module, family, directory):
    """Records of train() on `module`, saved and loaded in a new Python process."""
    directory.mkdir()
    path, out = directory / "model.pt", directory / "records.pt"
    torch.jit.save(module, str(path))
    script = FRESH_PROCESS_TRAINING.format(test_dir=HERE, models_dir=MODELS)
    done = subprocess.run([sys.executable, "-c", script, family.name, str(path), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{family.name}: the fresh process failed:\n{done.stderr[-3000:]}"
    return torch.load(str(out))


# Two processes a family: the families whose partition differs most (attention with a built-in
# mask, nn.Transformer's carried flag and later chain start, a U-Net's skips, Inception's
# pass-through branches, recurrent weights, a dict output), within the suite's time.
FRESH_PROCESS_FAMILIES = ["gpt_mask_builtin", "torch_transformer", "unet", "inception", "lstm_stack",
                          "dict_output"]


@pytest.mark.parametrize("name", FRESH_PROCESS_FAMILIES)
def test_unplanned_module_saves_and_trains_identically_in_a_fresh_process(name, tmp_path):
    """The reference trains in a fresh process too: in this one, scripted instances of a class
    share its methods' executors, which earlier tests ran optimized, and nn.Transformer's forward
    on 2.6 then differed from a fresh process's in the last bits without jitckpt."""
    family = families.FAMILIES[name]("test")
    model = jitckpt.checkpoint(family.make(0), memory_limit="min", profile_repeats=1)
    assert_same_training(f"{family.name}, unplanned, saved and loaded",
                         trained_in_a_fresh_process(family.make(0), family, tmp_path / "reference"),
                         trained_in_a_fresh_process(model, family, tmp_path / "rewritten"))
    assert jitckpt.plan(model)["variants"] == [], "saving planned"


def test_a_loaded_unplanned_module_keeps_the_cuts_it_was_saved_with(tmp_path):
    """What the rewrite keeps of the forward to cut the chain again is not saved: loaded, an
    unplanned module plans on its stages cut by tensor count (Inception's differ from its cuts by
    bytes), and trains as the unmodified model does."""
    family = families.FAMILIES["inception"]("test")
    model = jitckpt.checkpoint(family.make(0), memory_limit="min", profile_repeats=1)
    counted = jitckpt.plan(model)["labels"]
    assert counted != jitckpt.partition(family.make(0), family.inputs)["labels"]
    torch.jit.save(model, str(tmp_path / "model.pt"))
    loaded = torch.jit.load(str(tmp_path / "model.pt"))
    reference = train(family.make(0), family)
    assert_same_training(family.name, train(family.make(0), family), reference)
    assert_same_training(f"{family.name}, saved and loaded", train(loaded, family), reference)
    assert jitckpt.plan(loaded)["labels"] == counted


def step_peak(model, family) -> int:
    """Peak bytes of a training step above what was live before it, .grad freed first, and the
    caller's inputs that the chain holds."""
    model.zero_grad(set_to_none=True)
    with jitckpt.cpu_memory() as memory:
        train_step(model, family, 1)
    return memory.peak + families.caller_held_bytes(model, family.inputs)


@pytest.mark.parametrize("name", ["two_input", "gpt_mask_input", "unet", "lstm_stack"])
def test_min_is_the_smallest_limit_that_works(name):
    family = families.FAMILIES[name]("test")
    model = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit="min", profile_repeats=1)
    info = jitckpt.plan(model)
    named = info["memory_limit"]
    assert info["requested_limit"] == "min" and info["predicted_peak"] == named < info["unconstrained_peak"]
    loss_bytes = families.loss_held_bytes(train_step(model, family, 0), family.loss)
    # As in test_model_families: the step also holds what the loss computes, and small tensors.
    assert step_peak(model, family) <= named + loss_bytes + families.OUTSIDE_CHAIN_BYTES
    # Exact to the byte: one byte less is refused, and the error names this limit.
    with pytest.raises(RuntimeError, match=rf"smallest limit that works is [^(]*\({named} bytes\)"):
        jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=named - 1, reuse_profile_of=model)


def gradient_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", ["two_input", "gpt_mask_input", "dict_output"])
def test_auto_fits_an_injected_capacity(name):
    """"auto" with a capacity between what "min" needs and what no checkpointing needs: the plan
    made at the first training call fits it, and the measured step (gradients included) stays
    under it; so does the first training call itself, which profiles and plans (it may not run
    the chain without checkpointing), and planning with example inputs."""
    family = families.FAMILIES[name]("test")
    smallest = jitckpt.plan(jitckpt.checkpoint(family.make(0), family.inputs, memory_limit="min",
                                               profile_repeats=1))
    budget = (smallest["memory_limit"] + smallest["unconstrained_peak"]) // 2
    capacity = int((budget + gradient_bytes(family.make(0))) / 0.9)
    jitckpt._C.set_available_memory_for_testing(capacity)
    first_call = step_peak(jitckpt.checkpoint(family.make(0), memory_limit="auto", profile_repeats=1), family)
    assert first_call <= capacity, f"{name}: the planning call held {first_call} bytes, capacity {capacity}"
    with jitckpt.cpu_memory() as planning:
        jitckpt.checkpoint(family.make(0), family.inputs, memory_limit="auto", profile_repeats=1)
    assert planning.peak <= capacity, f"{name}: planning held {planning.peak} bytes, capacity {capacity}"
    model = jitckpt.checkpoint(family.make(0), memory_limit="auto")
    assert_same_training(name, train(family.make(0), family, steps=2), train(model, family, steps=2))
    info = jitckpt.plan(model)
    assert info["requested_limit"] == "auto"
    assert smallest["memory_limit"] <= info["memory_limit"] <= budget + 1024
    assert info["predicted_peak"] <= info["memory_limit"]
    peak = step_peak(model, family)
    assert peak <= capacity, f"{name}: measured {peak} bytes, capacity {capacity}"


@pytest.mark.parametrize("autocast", [False, True])
def test_auto_leaves_room_for_the_loss(autocast):
    """"auto" on a decoder whose logits are large beside its activations (vocabulary 2048), trained
    with cross-entropy, in float32 and under bfloat16 autocast, at a capacity that the unmodified
    model's step exceeds by 30%: the measured step, loss included, stays within it."""
    vocab, batch, length = 2048, 4, 128
    tokens = torch.randint(0, vocab, (batch, length + 1), generator=torch.Generator().manual_seed(0))

    def make():
        torch.manual_seed(0)
        return families.Llama(vocab, 64, 4, 2, 6).train()

    def step(model):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(tokens[:, :-1])
        torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten()).backward()

    unmodified = make()
    step(unmodified)
    with jitckpt.cpu_memory() as eager:
        step(unmodified)
    capacity = int(eager.peak / 1.3)
    jitckpt._C.set_available_memory_for_testing(capacity)
    model = jitckpt.checkpoint(make(), memory_limit="auto", profile_repeats=1)
    with jitckpt.cpu_memory() as first:
        step(model)
    with jitckpt.cpu_memory() as later:
        step(model)
    assert max(first.peak, later.peak) <= capacity, (first.peak, later.peak, capacity)


class GatedPositions(nn.Module):
    """Every layer scales by a table of positions gated before the chain: what the gates' autograd
    graph saves there (two sigmoids and a product, 192 KiB) is held from before the chain to the
    step's end. (Scaled, not added: a sum hands its gradient on to the table as it is, which the
    plan counts twice, and so it would hold a step that misses those 192 KiB.)"""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(1024, 16))
        self.gates = nn.Parameter(torch.randn(2, 1024, 16))
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.sigmoid(self.gates[0]) * torch.sigmoid(self.gates[1]) * self.table
        for layer in self.layers:
            x = torch.relu(layer(x)) * positions
        return x


def test_a_first_call_plan_counts_what_the_forward_holds_from_before_the_chain():
    """At "min" the plan is as tight as it gets: a first call's plan must count what the ops
    before the chain hold, as a plan with example inputs does from its own run of them."""
    torch.manual_seed(0)
    model = jitckpt.checkpoint(torch.jit.script(GatedPositions()), memory_limit="min", profile_repeats=1)
    x = torch.randn(1024, 16)
    loss = lambda y: y.sum()  # noqa: E731
    loss(model(x)).backward()
    info = jitckpt.plan(model)
    assert "Fn(" in info["schedule"], info["schedule"]  # recomputes
    model.zero_grad(set_to_none=True)
    with jitckpt.cpu_memory() as memory:
        loss(model(x)).backward()
    allowed = info["memory_limit"] + families.loss_held_bytes(model(x), loss) + families.OUTSIDE_CHAIN_BYTES
    assert memory.peak <= allowed, (memory.peak, allowed, info["memory_limit"])


def test_cpu_memory_counts_what_the_block_held_before_a_first_call_profiled():
    """jitckpt.cpu_memory around a first training call, which profiles and resets the allocator's
    peak for its own measurements: the block's peak still counts what it held before them."""
    family = families.FAMILIES["two_input"]("test")
    model = jitckpt.checkpoint(family.make(0), memory_limit=None, profile_repeats=1)
    with jitckpt.cpu_memory() as memory:
        held = torch.ones(4 << 20)  # 16 MiB, freed before the call
        del held
        train_step(model, family, 0)
    assert jitckpt.plan(model)["schedule"], "the call did not plan"
    assert memory.peak >= 16 << 20, memory.peak


def test_says_whether_the_chain_ran_without_checkpointing(capsys):
    """Planning with example inputs times the chain without checkpointing where it fits the
    available memory, and says so; where it does not fit, it says that it did not run it."""
    family = families.FAMILIES["two_input"]("test")
    not_run = "does not fit the device's available memory: not run"
    jitckpt.checkpoint(family.make(0), family.inputs, memory_limit="auto", profile_repeats=1, verbose=True)
    roomy = capsys.readouterr().err
    assert "timed the chain without checkpointing" in roomy and not_run not in roomy, roomy
    smallest = jitckpt.plan(jitckpt.checkpoint(family.make(0), family.inputs, memory_limit="min",
                                               profile_repeats=1))
    budget = (smallest["memory_limit"] + smallest["unconstrained_peak"]) // 2
    jitckpt._C.set_available_memory_for_testing(int((budget + gradient_bytes(family.make(0))) / 0.9))
    capsys.readouterr()
    jitckpt.checkpoint(family.make(0), family.inputs, memory_limit="auto", profile_repeats=1, verbose=True)
    tight = capsys.readouterr().err
    assert not_run in tight and "timed the chain without checkpointing" not in tight, tight


def test_auto_below_the_minimum_names_both():
    family = families.FAMILIES["two_input"]("test")
    jitckpt._C.set_available_memory_for_testing(20 * 1024)
    model = jitckpt.checkpoint(family.make(0), memory_limit="auto")
    with pytest.raises(RuntimeError, match=r"20\.00 KiB available.*smallest limit that works for inputs \[\[4, 3, 32, 32\]"):
        train_step(model, family, 0)
    # Nothing was planned, so a later call with room plans and trains exactly.
    jitckpt._C.set_available_memory_for_testing(-1)
    assert_same_training("two_input after a refused plan", train(family.make(0), family, steps=1),
                         train(model, family, steps=1))


def test_strip_gives_back_the_original_forward(family, tmp_path):
    rewritten = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None, profile_repeats=1)
    plain = jitckpt.strip(rewritten)
    assert not jitckpt.is_rewritten(plain)
    assert "jitckpt::chain" not in str(plain.forward.graph) and "jitckpt::chain" in str(rewritten.forward.graph)
    # ... as it was before the partition, without the flags it carries across cuts as tensors, and
    # with the user's calls not inlined: a saved module carries this copy, and TorchScript takes
    # seconds to compile an inlined transformer's forward again when it loads the file.
    assert "_carried" not in str(plain.forward.graph)
    kinds = [n.kind() for n in plain.forward.graph.nodes()]
    assert kinds == [n.kind() for n in family.make(0).forward.graph.nodes()], family.name
    # It shares the parameters of the rewritten module, and trains like the unmodified model (on the
    # families whose graphs the partition changes most, as the suite's time allows).
    assert all(a is b for a, b in zip(plain.parameters(), rewritten.parameters()))
    if family.name in FRESH_PROCESS_FAMILIES:
        assert_same_training(f"{family.name}, stripped", train(family.make(0), family), train(plain, family))
    # Saved, it loads where jitckpt is not imported.
    path = tmp_path / "plain.pt"
    torch.jit.save(plain, str(path))
    done = subprocess.run([sys.executable, "-c", "import sys, torch; torch.jit.load(sys.argv[1])", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_graph_passes_give_the_module_entry_points_stages(family):
    module = family.make(0)
    graph = module.forward.graph.copy()
    jitckpt._C._jit_pass_jitckpt_inline_calls(graph)
    jitckpt._C._jit_pass_jitckpt_bind_tensor_lists(module, graph)
    stages = jitckpt._C._jit_pass_jitckpt_partition(graph)
    assert stages["labels"] == jitckpt.partition(module)["labels"]
    rewritten = torch.jit._recursive.wrap_cpp_module(jitckpt._C._jit_pass_jitckpt_checkpoint(module._c, "0.5"))
    assert jitckpt.plan(rewritten)["labels"] == stages["labels"]
    assert "prim::GetAttr" in str(graph)  # the graph stays a torch._C.Graph, printable as one
