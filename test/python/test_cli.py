"""The command line (build/tools/cli/jitckpt): a model whose stage graphs hold constants that IR
text cannot carry is optimized into a file that `inspect` and torch.jit.load read back, a file
that cannot be loaded gets an error that says why, and its planning flags are jitckpt.checkpoint's
keywords, from one definition."""
import inspect
import os
import subprocess
import zipfile

import pytest
import torch
from torch import nn

import jitckpt  # (also registers the op and the Plan class that the saved file needs)
from jitckpt import api

CLI = os.environ.get("JITCKPT_CLI", os.path.join("build", "tools", "cli", "jitckpt"))


class InfiniteBounds(nn.Module):
    """Convolutions whose stages clamp with infinite bounds and fill with -inf and NaN: constants
    that IR text cannot carry, each inside a stage graph."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        h = torch.relu(self.c1(x)).clamp(min=float("-inf"), max=float("inf"))
        h = torch.relu(self.c2(h)).masked_fill(h > 1e30, float("-inf"))
        return self.c3(torch.nan_to_num(h.masked_fill(h < -1e30, float("nan")), nan=0.0, neginf=-1.0))


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300)


def scripted(seed: int = 0) -> torch.jit.ScriptModule:
    torch.manual_seed(seed)
    return torch.jit.script(InfiniteBounds().train())


def assert_trains_like_the_model(loaded: torch.jit.ScriptModule) -> None:
    """One step of the file the CLI wrote: the same parameter gradients as scripted(), bit for bit."""
    reference = scripted()
    x = torch.randn(2, 3, 16, 16)
    for m in (loaded, reference):
        with torch.jit.optimized_execution(False):
            m(x).pow(2).sum().backward()
    for (name, a), (_, b) in zip(reference.named_parameters(), loaded.named_parameters()):
        assert b.grad is not None and torch.equal(a.grad, b.grad), name


def test_optimize_then_inspect_and_train_a_model_with_infinite_constants(tmp_path):
    model, out = tmp_path / "model.pt", tmp_path / "out.pt"
    torch.jit.save(scripted(), str(model))
    done = run("optimize", model, "--input-shape", "2,3,16,16", "--memory-limit", "0.95", "-o", out)
    assert done.returncode == 0, done.stderr
    shown = run("inspect", out)
    assert shown.returncode == 0, shown.stderr
    assert "stages" in shown.stdout
    loaded = torch.jit.load(str(out))
    assert_trains_like_the_model(loaded)


def test_every_cut_gives_finer_stages_that_train_alike(tmp_path):
    model, out = tmp_path / "model.pt", tmp_path / "out.pt"
    torch.jit.save(scripted(), str(model))
    stages = {}
    for cuts in ("cheapest", "every"):
        done = run("optimize", model, "--input-shape", "2,3,16,16", "--memory-limit", "min", "--cuts", cuts,
                   "-o", out)
        assert done.returncode == 0, done.stderr
        loaded = torch.jit.load(str(out))
        stages[cuts] = jitckpt.plan(loaded)["num_stages"]
        assert_trains_like_the_model(loaded)
    assert stages["every"] > stages["cheapest"], stages  # each ReLU and clamp between convolutions
    refused = run("optimize", model, "--input-shape", "2,3,16,16", "--cuts", "all", "-o", out)
    assert refused.returncode != 0 and "--cuts" in refused.stderr


def test_optimize_without_inputs_plans_at_the_first_training_call(tmp_path):
    model, out = tmp_path / "model.pt", tmp_path / "out.pt"
    torch.jit.save(scripted(), str(model))
    done = run("optimize", model, "--memory-limit", "min", "-o", out)
    assert done.returncode == 0, done.stderr
    assert "first training call" in done.stdout
    shown = run("inspect", out)
    assert shown.returncode == 0 and "planned at the first training call" in shown.stdout, shown.stderr
    loaded = torch.jit.load(str(out))
    assert jitckpt.plan(loaded)["deferred"] and "schedule" not in jitckpt.plan(loaded)
    assert_trains_like_the_model(loaded)
    assert jitckpt.plan(loaded)["input_shapes"][0] == [2, 3, 16, 16]


def test_a_corrupt_plan_gets_its_reason(tmp_path):
    """A rewritten file whose plan holds a stage graph that does not parse (one byte changed): the
    IR parser's message starts with a blank line, and the reason must still be shown (the command
    line printed '()'), from torch.jit.load as from `inspect`."""
    good, broken = tmp_path / "model.pt", tmp_path / "broken.pt"
    torch.jit.save(jitckpt.checkpoint(scripted(), (torch.randn(2, 3, 16, 16),), memory_limit=None), str(good))
    with zipfile.ZipFile(good) as source, zipfile.ZipFile(broken, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename.endswith("data.pkl"):  # the plan's stage graphs are strings in it
                assert b"[value=1]" in data
                data = data.replace(b"[value=1]", b"[value=-]", 1)
            target.writestr(item, data)
    with pytest.raises(RuntimeError, match=r"corrupt jitckpt plan in this file: the graph of stage \d+ does not "
                                           r"parse \(Expected a number after '-'"):
        torch.jit.load(str(broken))
    done = run("inspect", broken)
    assert done.returncode != 0
    assert "cannot load" in done.stderr and "Expected a number after '-'" in done.stderr, done.stderr
    assert "()" not in done.stderr, done.stderr


def test_a_plan_whose_stage_reads_a_parameter_for_a_flag_is_corrupt(tmp_path):
    """A stage's list of lifted values edited to give a parameter where its graph takes the
    `training` flag (a bool): refused on load with what is wrong, not an internal assert of the
    interpreter at the first call."""
    torch.manual_seed(0)
    model = torch.jit.script(nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.ReLU(), nn.Linear(8, 8),
                                           nn.Dropout(0.1), nn.ReLU(), nn.Linear(8, 4)))
    good, broken = tmp_path / "model.pt", tmp_path / "broken.pt"
    torch.jit.save(jitckpt.checkpoint(model, (torch.randn(2, 8),), memory_limit=None, profile_repeats=1), str(good))
    with zipfile.ZipFile(good) as source, zipfile.ZipFile(broken, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename.endswith("data.pkl"):
                assert b'"1.training","3.weight"' in data and b'"lifted":[0,1,2]' in data
                data = data.replace(b'"lifted":[0,1,2]', b'"lifted":[0,1,3]', 1)  # 3.weight for 1.training
            target.writestr(item, data)
    with pytest.raises(RuntimeError, match=r"corrupt jitckpt plan in this file: .*stage 1 .* reads lifted value 3 "
                                           r"\(3.weight, a parameter\) where its graph takes an input of type bool"):
        torch.jit.load(str(broken))


OPT = os.environ.get("JITCKPT_OPT", os.path.join("build", "tools", "opt", "jitckpt-opt"))


class TokensAndMask(nn.Module):
    """Two inputs that are not float: token ids and a boolean mask."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, tokens, mask):
        x = self.embed(tokens)
        for layer in self.layers:
            x = torch.tanh(layer(x)).masked_fill(~mask.unsqueeze(-1), 0.0)
        return x


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The error of a failed run: exit status 2, one 'error:' line, no C++ or TorchScript frames."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for frame in ("Exception raised from", "frame #", "Traceback of TorchScript"):
        assert frame not in result.stderr, result.stderr
    return errors[0]


def test_inputs_of_any_dtype_and_several_inputs(tmp_path):
    model, out = tmp_path / "tokens.pt", tmp_path / "tokens.jitckpt.pt"
    torch.manual_seed(0)
    torch.jit.script(TokensAndMask().train()).save(str(model))
    done = run("optimize", model, "--input", "int64:4,16", "--input", "bool:4,16", "--memory-limit", "0.9",
               "-o", out)
    assert done.returncode == 0, done.stderr
    shown = run("inspect", out)
    assert shown.returncode == 0 and " ms" in shown.stdout.splitlines()[0], shown.stdout
    loaded = torch.jit.load(str(out))
    tokens = torch.randint(0, 11, (4, 16))
    mask = torch.rand(4, 16) > 0.3
    loaded(tokens, mask).sum().backward()
    assert all(p.grad is not None for p in loaded.parameters())
    assert "unknown dtype" in one_line_error(run("optimize", model, "--input", "int65:4,16", "-o", out))


def test_a_limit_of_one_and_a_half_is_refused_as_in_python(tmp_path):
    model = tmp_path / "m.pt"
    scripted().save(str(model))
    error = one_line_error(run("optimize", model, "--input", "2,3,16,16", "--memory-limit", "1.5",
                               "-o", tmp_path / "out.pt"))
    assert "neither a fraction" in error
    with pytest.raises(ValueError, match="fraction"):
        jitckpt.checkpoint(scripted(), (torch.randn(2, 3, 16, 16),), memory_limit=1.5)


def test_a_limit_too_large_for_bytes_is_refused_not_wrapped():
    with pytest.raises(ValueError, match="more than 8 EiB") as raised:
        jitckpt.checkpoint(scripted(), (torch.randn(2, 3, 16, 16),), memory_limit=10**30)
    assert "-" not in str(raised.value).split("EiB")[0].split("'")[-1]


def test_a_missing_output_folder_is_reported_before_profiling(tmp_path):
    model = tmp_path / "m.pt"
    scripted().save(str(model))
    result = run("optimize", model, "--input", "2,3,16,16", "-o", tmp_path / "no" / "such" / "out.pt")
    assert "does not exist" in one_line_error(result)
    assert "partitioned" not in result.stderr and "profil" not in result.stderr


def test_wrong_input_shapes_name_the_models_own_error(tmp_path):
    model = tmp_path / "m.pt"
    scripted().save(str(model))
    error = one_line_error(run("optimize", model, "--input", "2,5,16,16", "-o", tmp_path / "out.pt"))
    assert "running forward on the example inputs failed" in error and "channels" in error


def test_jitckpt_opt_on_files_that_are_not_modules(tmp_path):
    state_dict = tmp_path / "weights.pt"
    torch.save({"w": torch.ones(2)}, str(state_dict))
    assert "cannot load" in one_line_error(subprocess.run([OPT, str(state_dict)], capture_output=True, text=True))
    text = tmp_path / "notes.txt"
    text.write_text("not IR\n")
    assert "graph(" in one_line_error(subprocess.run([OPT, str(text)], capture_output=True, text=True))
    model = tmp_path / "m.pt"
    scripted().save(str(model))
    bad_shape = subprocess.run([OPT, str(model), "--input", "2,x"], capture_output=True, text=True)
    assert "positive integers" in one_line_error(bad_shape)


def test_the_planning_options_are_one_definition_for_python_and_the_command_line(tmp_path):
    signature = inspect.signature(jitckpt.checkpoint).parameters
    options = jitckpt._C.user_options()
    assert [name for name, _, _ in options][:2] == ["memory_limit", "strategy"]
    defaults = api._option_texts(**{name: signature[name].default for name, _, _ in options})
    assert defaults == {name: default for name, default, _ in options if default}
    usage = run("optimize", "--help").stdout
    for name, _, help_text in options:
        assert "--" + name.replace("_", "-") in usage, name
    # Refused alike, with the same words.
    model = tmp_path / "m.pt"
    scripted().save(str(model))
    refused = run("optimize", model, "--input", "2,3,16,16", "--strategy", "revolve", "--schedule",
                  "Fall(1) B(1)", "-o", tmp_path / "out.pt")
    with pytest.raises(ValueError, match="leave strategy") as raised:
        jitckpt.checkpoint(scripted(), (torch.randn(2, 3, 16, 16),), strategy="revolve", schedule="Fall(1) B(1)")
    assert refused.returncode != 0 and str(raised.value) in refused.stderr
