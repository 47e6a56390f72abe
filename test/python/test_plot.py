"""What users look at: the profiling progress callback, jitckpt.plot (the time-memory curve with
the plan and the baselines marked) and `python -m jitckpt inspect --plot`."""
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import jitckpt
from jitckpt.__main__ import _split_plot

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


class Tower(nn.Module):
    def __init__(self, depth: int = 8):
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()) for _ in range(depth)])
        self.head = nn.Conv2d(3, 8, 1)

    def forward(self, x):
        return self.blocks(self.head(x))


def rewritten(**kwargs) -> torch.jit.ScriptModule:
    torch.manual_seed(0)
    model = torch.jit.script(Tower().train())
    return jitckpt.checkpoint(model, (torch.randn(2, 3, 24, 24),), memory_limit=0.75, **kwargs)


def test_progress_is_called_once_per_profiled_stage():
    calls = []
    model = rewritten(progress=lambda stage, stages: calls.append((stage, stages)))
    stages = jitckpt.plan(model)["num_stages"]
    assert stages >= 8
    assert calls == [(s, stages) for s in range(1, stages + 1)]


def test_profiling_off_a_terminal_prints_nothing_unless_verbose(capfd):
    rewritten()
    assert capfd.readouterr().err == ""
    stages = jitckpt.plan(rewritten(verbose=True))["num_stages"]
    err = capfd.readouterr().err
    # The bar (tqdm's, or a line of its own without tqdm) reaches the last stage.
    assert f"{stages}/{stages}" in err and "solved" in err


def test_plot_marks_the_plan_and_the_baselines(tmp_path):
    model = rewritten()
    info = jitckpt.plan(model)
    baselines = dict((name, (peak, time)) for name, peak, time in info["baselines"])
    # No checkpointing is the unconstrained point; every periodic point needs less memory.
    assert baselines["no checkpointing"][0] == info["unconstrained_peak"]
    periodic = [v for k, v in baselines.items() if k.startswith("checkpoint_sequential")]
    assert len(periodic) >= 2
    assert all(peak <= info["unconstrained_peak"] for peak, _ in periodic)
    assert min(peak for peak, _ in periodic) < info["unconstrained_peak"]
    # The plotted curve: its times fall as the limit grows, and the plan the module runs is at
    # least as fast as every plotted point that fits its limit.
    steps = jitckpt.plotting.fastest_within(info["curve"], info["baselines"])
    assert all(a[0] < b[0] and a[1] > b[1] for a, b in zip(steps, steps[1:]))
    fitting = [t for limit, t in steps if limit <= info["memory_limit"]]
    assert fitting and info["predicted_time_ms"] <= min(fitting) * (1 + 1e-6)  # the curve holds floats
    assert info["predicted_peak"] <= info["memory_limit"]

    path = tmp_path / "curve.png"
    ax = jitckpt.plot(model, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mib = 1 << 20
    points = [tuple(p) for c in ax.collections for p in c.get_offsets().tolist()]
    plan_point = (info["predicted_peak"] / mib, info["predicted_time_ms"])
    assert any(abs(x - plan_point[0]) < 1e-9 and abs(y - plan_point[1]) < 1e-9 for x, y in points), points
    assert len(points) == len(info["baselines"]) + 1


def test_plot_refuses_a_module_that_was_not_rewritten():
    with pytest.raises(RuntimeError, match="not rewritten"):
        jitckpt.plot(torch.jit.script(Tower()))


def test_split_plot_takes_the_option_out_of_inspect_only():
    assert _split_plot(["inspect", "m.pt", "--plot", "c.png", "--graph"]) == (["inspect", "m.pt", "--graph"], "c.png")
    assert _split_plot(["inspect", "--plot=c.svg", "m.pt"]) == (["inspect", "m.pt"], "c.svg")
    assert _split_plot(["optimize", "m.pt", "--plot", "x"]) == (["optimize", "m.pt", "--plot", "x"], None)
    with pytest.raises(SystemExit):
        _split_plot(["inspect", "m.pt", "--plot"])


def test_python_m_jitckpt_inspect_plots(tmp_path):
    model = rewritten()
    torch.jit.save(model, str(tmp_path / "model.pt"))
    done = subprocess.run([sys.executable, "-m", "jitckpt", "inspect", str(tmp_path / "model.pt"), "--plot",
                           str(tmp_path / "c.png")], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert "stages" in done.stdout and "plotted" in done.stdout
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    unplanned = tmp_path / "plain.pt"
    torch.jit.save(torch.jit.script(Tower()), str(unplanned))
    done = subprocess.run([sys.executable, "-m", "jitckpt", "inspect", str(unplanned), "--plot",
                           str(tmp_path / "d.png")], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "not rewritten" in done.stdout + done.stderr
    assert not (tmp_path / "d.png").exists()
