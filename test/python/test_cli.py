"""The command line (build/tools/cli/jitckpt): a model whose stage graphs hold constants that IR
text cannot carry is optimized into a file that `inspect` and torch.jit.load read back, and a file
that cannot be loaded gets an error that says why."""
import os
import subprocess
import zipfile

import pytest
import torch
from torch import nn

import jitckpt  # noqa: F401  (registers the op and the Plan class that the saved file needs)

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


def test_optimize_then_inspect_and_train_a_model_with_infinite_constants(tmp_path):
    model, out = tmp_path / "model.pt", tmp_path / "out.pt"
    torch.jit.save(scripted(), str(model))
    done = run("optimize", model, "--input-shape", "2,3,16,16", "--memory-limit", "0.95", "-o", out)
    assert done.returncode == 0, done.stderr
    shown = run("inspect", out)
    assert shown.returncode == 0, shown.stderr
    assert "stages" in shown.stdout
    loaded, reference = torch.jit.load(str(out)), scripted()
    x = torch.randn(2, 3, 16, 16)
    for m in (loaded, reference):
        with torch.jit.optimized_execution(False):
            m(x).pow(2).sum().backward()
    for (name, a), (_, b) in zip(reference.named_parameters(), loaded.named_parameters()):
        assert b.grad is not None and torch.equal(a.grad, b.grad), name


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
