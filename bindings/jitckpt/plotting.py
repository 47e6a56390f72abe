"""jitckpt.plot: the time-memory curve of a rewritten module, with the chosen plan and the
baselines marked (matplotlib). Every point is the solver's prediction from the profiled costs."""
from typing import Any, List, Optional, Sequence, Tuple

import torch

from . import _C
from .api import _rewritten


def fastest_within(curve: Sequence[Tuple[int, float]], baselines: Sequence[Tuple[str, int, float]]
                   ) -> List[Tuple[int, float]]:
    """The fastest predicted time at each limit among the DP's curve and the baseline points, as
    (limit, time) steps: what the "optimal" strategy picks from (the DP rounds sizes up to its
    memory slots, so near a baseline's peak the baseline can be faster)."""
    candidates = sorted([(int(m), float(t)) for m, t in curve] + [(int(p), float(t)) for _, p, t in baselines])
    steps: List[Tuple[int, float]] = []
    for limit, time in candidates:
        if not steps or time < steps[-1][1]:
            steps.append((limit, time))
    return steps


def plot(module: torch.jit.ScriptModule, path: Optional[str] = None, ax: Any = None) -> Any:
    """Draws the fastest predicted step time within each activation memory limit, the
    plan the module runs (its limit and predicted peak), and the predicted points of no
    checkpointing and of checkpoint_sequential with 2 to 2*sqrt(L) segments.

    path: where to save the figure (png, pdf, svg: matplotlib's formats). ax: a matplotlib Axes
    to draw into. Returns the Axes. Needs matplotlib (Debian: python3-matplotlib)."""
    try:
        import matplotlib

        if ax is None and path is not None:
            matplotlib.use("Agg")  # saving a file needs no display
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("jitckpt.plot needs matplotlib: apt-get install python3-matplotlib "
                          "(or pip install matplotlib)") from error
    info = _C.plan_info(_rewritten(module, "plot"))
    if "curve" not in info:
        raise ValueError("this module plans at its first training call and has not had one yet: "
                         "run a training step (forward and backward), then plot")
    mib = 1 << 20
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    baselines = info["baselines"]
    steps = fastest_within(info["curve"], baselines)
    limits, times = zip(*steps)
    ax.step([m / mib for m in limits], times, where="post", label="optimal (jitckpt): fastest within the limit")
    none = [b for b in baselines if b[0] == "no checkpointing"]
    periodic = [b for b in baselines if b[0] != "no checkpointing"]
    if periodic:
        ax.scatter([b[1] / mib for b in periodic], [b[2] for b in periodic], marker="s",
                   color="tab:orange", label="checkpoint_sequential (2 to 2\u221aL segments)")
    for _, peak, time in none:
        ax.scatter([peak / mib], [time], marker="^", color="tab:gray", label="no checkpointing")
    ax.scatter([info["predicted_peak"] / mib], [info["predicted_time_ms"]], marker="*", s=160,
               color="tab:red", zorder=3,
               label=f"this plan ({info['strategy']}, limit {_C.format_bytes(info['memory_limit'])})")
    ax.axvline(info["memory_limit"] / mib, color="tab:red", linestyle=":", linewidth=1)
    ax.set_xlabel("activation memory (MiB, predicted peak or limit)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title(f"{info['num_stages']} stages, inputs {info['input_shapes']}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    if path is not None:
        ax.figure.tight_layout()
        ax.figure.savefig(path)
    return ax
