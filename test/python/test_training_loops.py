"""Training loops of PyTorch 2.x users beyond the AdamW loops of the other files: float16 autocast
with a GradScaler, whose skipped steps (gradients that overflow) must be skipped alike; models
whose layers already checkpoint themselves with torch.utils.checkpoint (Hugging Face's
gradient_checkpointing_enable() left on); module hooks (forward hooks that change an output or
store it, backward hooks, PyTorch's weight hooks) and parameter hooks; Python values on the model
that the loop sets (read by forward or not); a schedule of one's own over lengths that export
captures apart. Each trains bit for bit like the model, itself trained twice first, or is refused
or warned of, naming what."""
import functools
import warnings
from typing import Any, List

import pytest
import torch

import jitckpt
from jitckpt.export import capture

import families
import hf_style

pytestmark = pytest.mark.skipif(not capture.available(), reason="torch.export's training capture needs PyTorch 2.6")

LENGTHS = (24, 16, 32, 16, 24, 16)


def assert_same_bits(reference: List[torch.Tensor], other: List[torch.Tensor], what: str) -> None:
    """Equal tensors, NaN where the reference has NaN (an overflowed step's gradients)."""
    assert len(reference) == len(other), what
    for i, (a, b) in enumerate(zip(reference, other)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what}, record {i}"
        assert bool(((a == b) | (a.isnan() & b.isnan())).all()), f"{what}, record {i}"


def scaled_steps(model: torch.nn.Module, init_scale: float) -> List[torch.Tensor]:
    """Float16 autocast and a GradScaler that grows each step, two micro-batches a step, gradients
    unscaled and clipped: each loss, then each step's gradients, scale and parameters."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1)
    record: List[torch.Tensor] = []
    for i, length in enumerate(LENGTHS):
        torch.manual_seed(i)  # dropout
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(**hf_style.batch("causal_lm", length, seed=i)).loss
        scaler.scale(loss / 2).backward()
        record.append(loss.detach())
        if i % 2 == 1:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, 0.5)
            record += [p.grad.clone() for p in parameters]
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            record.append(torch.tensor(scaler.get_scale()))
            record += [p.detach().clone() for p in parameters]
    return record


@pytest.mark.skipif(not hasattr(torch, "amp") or not hasattr(torch.amp, "GradScaler"),
                    reason="a GradScaler on the CPU needs torch.amp.GradScaler")
@pytest.mark.parametrize("init_scale", [2.0 ** 8, 2.0 ** 40], ids=["in_range", "overflowing"])
def test_float16_with_a_grad_scaler_skips_the_steps_the_model_skips(init_scale):
    reference = scaled_steps(hf_style.make("causal_lm"), init_scale)
    assert_same_bits(reference, scaled_steps(hf_style.make("causal_lm"), init_scale), "the model twice")
    scales = [float(t) for t in reference if t.dim() == 0 and t.dtype == torch.float32 and t.item() >= 1]
    if init_scale > 2.0 ** 20:  # the scaler backed off: steps were skipped on gradients that overflowed
        assert any(torch.isinf(t).any() or torch.isnan(t).any() for t in reference)
        assert min(scales) < init_scale
    model = jitckpt.checkpoint(hf_style.make("causal_lm"), memory_limit="min", profile_repeats=1)
    assert_same_bits(reference, scaled_steps(model, init_scale), "through jitckpt")
    info = jitckpt.plan(model)
    assert info["num_stages"] >= hf_style.Config().num_layers
    assert info["predicted_peak"] <= info["memory_limit"] < info["unconstrained_peak"]


class SelfCheckpointed(torch.nn.Module):
    """A layer that checkpoints itself, as Hugging Face's layers do under gradient_checkpointing_enable()."""

    def __init__(self, layer: torch.nn.Module, reentrant: bool) -> None:
        super().__init__()
        self.layer = layer
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        # the layer's keyword arguments bound first, as Hugging Face does: the reentrant form takes none
        return torch.utils.checkpoint.checkpoint(functools.partial(self.layer, **kwargs), x,
                                                 use_reentrant=self.reentrant)


def self_checkpointed(reentrant: bool) -> torch.nn.Module:
    model = hf_style.make("causal_lm")
    for i, layer in enumerate(model.model.layers):
        model.model.layers[i] = SelfCheckpointed(layer, reentrant)
    return model


def adamw_steps(model: torch.nn.Module) -> List[torch.Tensor]:
    """families.adamw_record over four language-model batches of varying length."""

    def loss(i: int) -> torch.Tensor:
        torch.manual_seed(i)  # dropout, which torch.utils.checkpoint replays in its recomputation
        return model(**hf_style.batch("causal_lm", LENGTHS[i], seed=i)).loss

    return families.adamw_record(model, loss, lr=1e-2, max_norm=0.5)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_layers_that_checkpoint_themselves_train_bit_for_bit_with_a_stage_each(reentrant):
    reference = adamw_steps(hf_style.make("causal_lm"))
    assert_same_bits(reference, adamw_steps(self_checkpointed(reentrant)), "torch.utils.checkpoint in the model")
    assert_same_bits(reference, adamw_steps(self_checkpointed(reentrant)), "the self-checkpointed model twice")
    model = jitckpt.checkpoint(self_checkpointed(reentrant), memory_limit="min", profile_repeats=1)
    assert_same_bits(reference, adamw_steps(model), "through jitckpt")
    info = jitckpt.plan(model)
    assert info["num_stages"] >= hf_style.Config().num_layers, info["labels"]
    assert info["predicted_peak"] <= info["memory_limit"] < info["unconstrained_peak"]


def test_forward_hooks_are_named_in_a_warning_and_what_they_return_trains_as_the_model():
    """A hook that returns a new output is in the captured graph; one that stores its output
    elsewhere ran once, at the capture, which the warning says. PyTorch's own weight hook (the old
    weight norm's) is neither warned of nor lost."""

    def make() -> torch.nn.Module:
        model = hf_style.make("causal_lm")
        model.model.layers[1].register_forward_hook(lambda module, inputs, output: output * 0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated for parametrizations, still used
            model.model.layers[0].up = torch.nn.utils.weight_norm(model.model.layers[0].up)
        return model

    reference = adamw_steps(make())
    assert_same_bits(reference, adamw_steps(make()), "the model twice")
    model = make()
    stored: List[Any] = []
    model.model.layers[2].register_forward_pre_hook(lambda module, inputs: stored.append(inputs[0].detach()))
    checkpointed = jitckpt.checkpoint(model, memory_limit="min", profile_repeats=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record = adamw_steps(checkpointed)
    assert_same_bits(reference, record, "through jitckpt")
    hook_warnings = [str(w.message) for w in caught if "forward hooks" in str(w.message)]
    assert hook_warnings, [str(w.message) for w in caught]
    assert all("model.layers.2 (" in text and "<lambda> at " in text for text in hook_warnings), hook_warnings
    assert all("model.layers.1 (" in text and "layers.0" not in text
               for text in hook_warnings), hook_warnings
    assert len(stored) < len(LENGTHS[:4])  # what the warning says: training calls do not run it


def test_module_backward_hooks_are_refused_naming_them_and_parameter_hooks_fire():
    model = hf_style.make("causal_lm")
    model.model.layers[1].register_full_backward_hook(lambda module, grad_input, grad_output: None)
    for front_end in ("export", "auto"):
        with pytest.raises(capture.CaptureError, match=r"CausalLM has module backward hooks, which a checkpointed "
                                                       r"model cannot call .*model\.layers\.1 \(.*<lambda> at .*"
                                                       r"hook the gradients of the parameters instead") as refused:
            jitckpt.checkpoint(model, memory_limit="min", front_end=front_end)(**hf_style.batch("causal_lm", 16))
        assert "checkpoint the part" not in str(refused.value)  # the only part holds the hook
    model = hf_style.make("causal_lm")
    fired: List[torch.Tensor] = []
    model.model.layers[1].up.weight.register_hook(lambda grad: fired.append(grad.clone()))
    plain = hf_style.make("causal_lm")
    expected: List[torch.Tensor] = []
    plain.model.layers[1].up.weight.register_hook(lambda grad: expected.append(grad.clone()))
    assert_same_bits(adamw_steps(plain), adamw_steps(jitckpt.checkpoint(model, memory_limit="min", profile_repeats=1)),
                     "a parameter hook's model")
    assert_same_bits(expected, fired, "what the parameter hook saw")


def resumed_steps(model: torch.nn.Module) -> List[torch.Tensor]:
    """Two steps, then the parameters of `model.module` (or `model`) replaced by those of another
    copy, as a run resumed with load_state_dict(assign=True) has them, its last layer replaced (an
    adapter injected), and two steps more with a new optimizer."""
    inner = getattr(model, "module", model)
    record = adamw_steps(model)
    inner.load_state_dict(hf_style.make("causal_lm", seed=1).state_dict(), assign=True)
    torch.manual_seed(5)
    inner.model.layers[3] = hf_style.Layer(hf_style.Config())
    return record + adamw_steps(model)


def test_parameters_replaced_after_a_capture_are_trained_not_the_old_ones():
    reference = resumed_steps(hf_style.make("causal_lm"))
    assert_same_bits(reference, resumed_steps(hf_style.make("causal_lm")), "the model twice")
    model = jitckpt.checkpoint(hf_style.make("causal_lm"), memory_limit="min", profile_repeats=1)
    with pytest.warns(UserWarning, match=r"CausalLM's model\.embed\.weight is another tensor than when jitckpt "
                                         r"captured the model .*captures and plans it again"):
        record = resumed_steps(model)
    assert_same_bits(reference, record, "through jitckpt")
    assert all(p.grad is None for p in model.module.parameters())  # zeroed by the last step, as the model's


def test_functional_call_is_refused_not_run_on_the_parameters_captured():
    """torch.func.functional_call puts plain tensors where the parameters were; the captured graph
    holds the parameters, which it would train instead, and export takes only parameters."""
    model = jitckpt.checkpoint(hf_style.make("causal_lm"), memory_limit="min", profile_repeats=1)
    model(**hf_style.batch("causal_lm", 16)).loss.backward()  # captured with the model's own tensors
    tensors = {"module." + name: t.detach().clone().requires_grad_() for name, t in
               hf_style.make("causal_lm", seed=1).named_parameters()}
    with pytest.warns(UserWarning, match="is another tensor than when jitckpt captured the model"), \
            pytest.raises(capture.CaptureError, match=r"CausalLM's parameter model\.embed\.weight is a plain tensor, "
                                                      r"not an nn\.Parameter, as torch\.func\.functional_call"):
        torch.func.functional_call(model, tensors, (), hf_style.batch("causal_lm", 16))
    before = [p.detach().clone() for p in model.parameters()]
    model(**hf_style.batch("causal_lm", 16)).loss.backward()  # its own parameters again: trains on
    assert all(p.grad is not None for p in model.parameters())
    assert_same_bits(before, [p.detach() for p in model.parameters()], "nothing changed by the refused call")


class Tempered(torch.nn.Module):
    """Blocks, a dropout and a temperature that the training loop anneals (Python values that
    export records as constants)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU())
                                            for _ in range(4)))
        self.drop = torch.nn.Dropout(0.0)
        self.temperature = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.drop(self.blocks(x)) / self.temperature).log_softmax(-1)


def annealed_steps(model: torch.nn.Module, inner: torch.nn.Module) -> List[torch.Tensor]:
    """Six steps; the temperature and the dropout's probability set before the third and the
    fifth (back to where they began)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    record: List[torch.Tensor] = []
    for step, (temperature, p) in enumerate([(1.0, 0.0)] * 2 + [(0.5, 0.25)] * 2 + [(1.0, 0.0)] * 2):
        inner.temperature, inner.drop.p = temperature, p
        torch.manual_seed(step)
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step))
        loss = -model(x)[:, 0].mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        record += [loss.detach()] + [p.detach().clone() for p in model.parameters()]
    return record


class TemperedBranch(Tempered):
    """The same, with a branch on data: export cannot capture it, and it trains through TorchScript,
    whose scripted copy holds the Python values as they were when it was scripted."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(x)
        if bool(x.sum() > 0):
            x = x * 2
        return (self.drop(x) / self.temperature).log_softmax(-1)


def trained_like_the_model(model_type: type, steps: Any) -> Any:
    """`steps` (model, the module whose values the loop sets) on the model twice, then through
    jitckpt, bit for bit: the checkpointed model, and what jitckpt said of changed values."""
    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return model_type()

    plain = make()
    reference = steps(plain, plain)
    again = make()
    assert_same_bits(reference, steps(again, again), "the model twice")
    model = make()
    checkpointed = jitckpt.checkpoint(model, memory_limit="min", profile_repeats=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same_bits(reference, steps(checkpointed, model), "through jitckpt")
    return checkpointed, [str(w.message) for w in caught if "changed since jitckpt captured" in str(w.message)]


@pytest.mark.parametrize("model_type", [Tempered, TemperedBranch], ids=["export", "torchscript"])
def test_python_values_changed_between_steps_are_read_as_the_model_reads_them(model_type):
    checkpointed, said = trained_like_the_model(model_type, annealed_steps)
    assert len(said) == 1 and said[0].startswith(f"{model_type.__name__}'s temperature (1.0 to 0.5), drop.p (0.0 to "
                                                 "0.25) changed since jitckpt captured the model"), said
    if model_type is Tempered:
        assert len(checkpointed._captures) == 2  # the first serves again when the values come back
    else:
        assert checkpointed.front_end == "script"


class Counted(Tempered):
    """The same, with values that forward never reads: a step the loop keeps on the model, and the
    batch size of the last call, which forward sets."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last_rows = x.shape[0]
        return super().forward(x)


def counted_steps(model: torch.nn.Module, inner: torch.nn.Module) -> List[torch.Tensor]:
    """Four steps, the step number set on the model before each, and a call without gradients on
    a batch of another size after each (an evaluation: it runs the model itself)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    record: List[torch.Tensor] = []
    for step in range(4):
        inner.step = step
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step))
        loss = -model(x)[:, 0].mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            evaluated = model(x[:3])
        record += [loss.detach(), evaluated] + [p.detach().clone() for p in model.parameters()]
    return record


def test_python_values_that_forward_does_not_read_make_no_capture():
    checkpointed, said = trained_like_the_model(Counted, counted_steps)
    assert not said and len(checkpointed._captures) == 1, said


class DeeperWhenLong(torch.nn.Module):
    """Export bounds the length by forward's branch on it: a shorter sequence is captured apart,
    into another chain of stages."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.embed = torch.nn.Embedding(16, width)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(4))
        self.head = torch.nn.Linear(width, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers[:4 if tokens.shape[1] > 8 else 2]:
            x = layer(x).tanh()
        return self.head(x.mean(1))


def test_a_schedule_of_ones_own_is_refused_for_a_capture_it_was_not_written_for():
    generator = torch.Generator().manual_seed(0)
    tokens = [torch.randint(0, 16, (2, length), generator=generator) for length in (16, 4)]
    torch.manual_seed(0)
    probe = jitckpt.checkpoint(DeeperWhenLong(), (tokens[0],), memory_limit="min")
    model = jitckpt.checkpoint(DeeperWhenLong(), (tokens[0],), memory_limit=None,
                               schedule=jitckpt.plan(probe)["schedule"])
    model(tokens[0]).sum().backward()
    with pytest.raises(RuntimeError, match=r"the given schedule is not valid .*; export captured the model again "
                                           r"for these inputs, into a chain other than the one the schedule was "
                                           r"written for: give a schedule only for inputs one capture serves"):
        model(tokens[1]).sum().backward()


class ImageThenSequence(torch.nn.Module):
    """Convolutions over an image (export keeps its height and width static), or over a sequence."""

    def __init__(self, image: bool):
        super().__init__()
        self.image = image
        convolution = torch.nn.Conv2d if image else torch.nn.Conv1d
        self.layers = torch.nn.Sequential(*(convolution(3, 3, 3, padding=1) for _ in range(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).flatten(2).mean(2)


@pytest.mark.parametrize("image", [True, False])
def test_a_size_export_kept_static_is_named_once_where_it_makes_new_captures(image):
    checkpointed = jitckpt.checkpoint(ImageThenSequence(image), memory_limit="min")
    generator = torch.Generator().manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for size in (16, 12, 20, 12):
            shape = (2, 3, size, size) if image else (2, 3, size)
            checkpointed(torch.randn(shape, generator=generator)).sum().backward()
    said = [str(w.message) for w in caught if "static in the capture" in str(w.message)]
    if image:
        assert len(said) == 1 and "tensor argument 0 has another size in dimension 2" in said[0], said
        assert "an image's size is kept static" in said[0] and "front_end=\"script\" plans new sizes" in said[0]
        assert len(checkpointed._captures) == 3
    else:  # the length stays dynamic
        assert not said and len(checkpointed._captures) == 1
