"""One experiment of the paper's protocol (section 5): for a model, image size, batch and device,
the throughput of a training step against its peak memory, one series per strategy.

    PYTHONPATH=build/python /usr/bin/python3 bench/models_bench.py --model resnet18 --image 64 \
        --batch 8 --out bench/results/cpu

Series:
  plain       the scripted model under TorchScript's executor, no checkpointing
  sequential  torch.utils.checkpoint.checkpoint_sequential on the equivalent eager nn.Sequential,
              10 segment counts from 2 to 2*sqrt(L) (L: the Sequential's length)
  periodic    jitckpt's periodic schedule, 2 to 2*sqrt(L) segments (L: jitckpt's stage count)
  revolve     jitckpt's revolve-style schedule at each limit
  optimal     jitckpt's optimal schedule, unconstrained and at --limits limits evenly spaced up to
              the unconstrained activation peak (the profile is taken once and reused)
  compile     torch.compile with torch._functorch.config.activation_memory_budget at each of
              --compile-budgets, where that option exists (PyTorch 2.4+); it also fuses kernels,
              so its throughput does not isolate the schedule

Plain and jitckpt unconstrained are also timed in --paired-rounds alternating rounds: their ratio
is the overhead figure that machine drifts do not move.

Each point: a warm-up step (it allocates the gradients), the peak of one step above what was held
before it (CPU: jitckpt's counting allocator, exact; CUDA: the caching allocator's allocated-bytes
peak), then the median of --runs timed runs, each of as many steps as make plain last
--min-seconds (the paper: 5 runs, 500 ms). A point that runs out of memory is recorded with status
"oom" and left off the plot, as in the paper; a limit that a strategy cannot meet, as "infeasible".

Writes <out>/<name>.csv (the points), <name>.json (settings, points, summary) and <name>.png.
"""
import argparse
import csv
import inspect
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Callable, Dict, List, Optional

import torch
import torch.utils.checkpoint

import jitckpt
import summary
import zoo
from common import (is_out_of_memory, make_step, measure, release_memory, steps_per_run, synchronize,
                    use_threads)

FIELDS = ["strategy", "parameter", "status", "limit_bytes", "measured_peak", "measured_ms", "throughput",
          "predicted_peak", "predicted_ms", "note"]
STYLES = {"plain": ("s", "red"), "sequential": ("x", "purple"), "periodic": ("+", "gray"),
          "revolve": ("o-", "green"), "optimal": ("^-", "blue"), "compile": ("d-", "orange")}


def segment_counts(length: int, count: int = 10) -> List[int]:
    """The paper's segment counts: `count` values from 2 (always) to 2*sqrt(length)."""
    top = max(2.0, 2 * math.sqrt(length))
    return sorted({min(length, max(2, round(2 + i * (top - 2) / (count - 1)))) for i in range(count)})


def sequential_forward(eager: torch.nn.Sequential, segments: int) -> Callable:
    # 2.x asks for use_reentrant; 1.13 has only the reentrant form, which needs an input that
    # requires grad (the caller gives one).
    if uses_reentrant_checkpoint():
        return lambda x: torch.utils.checkpoint.checkpoint_sequential(eager, segments, x)
    return lambda x: torch.utils.checkpoint.checkpoint_sequential(eager, segments, x, use_reentrant=False)


def uses_reentrant_checkpoint() -> bool:
    return "use_reentrant" not in inspect.signature(torch.utils.checkpoint.checkpoint_sequential).parameters


def paired_ratio(base: Callable, other: Callable, device: str, steps: int, rounds: int) -> float:
    """Median over rounds of time(other) / time(base), each round timing one run of `steps` steps
    of each, the order alternating: slow drifts of the machine cancel out of the ratio."""
    def run(step: Callable) -> float:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize(device)
        return time.perf_counter() - start

    ratios = []
    for i in range(rounds):
        if i % 2 == 0:
            a, b = run(base), run(other)
        else:
            b, a = run(other), run(base)
        ratios.append(b / a)
    return statistics.median(ratios)


def functorch_config():
    try:
        import torch._functorch.config as config
    except ImportError:
        return None
    return config if hasattr(config, "activation_memory_budget") else None


class Experiment:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.device = args.device
        self.name = f"{args.model}-{args.image}px-batch{args.batch}-{args.device.split(':')[0]}"
        self.rows: List[Dict] = []
        self.steps: Optional[int] = None  # steps per timed run, fixed by plain (the paper's rule)
        self.paired_overhead: Optional[float] = None

    def record(self, strategy: str, parameter, status: str, seconds: float = 0.0, peak: int = 0,
               info: Optional[Dict] = None, note: str = "") -> None:
        row = {"strategy": strategy, "parameter": parameter, "status": status,
               "limit_bytes": info["memory_limit"] if info else "",
               "measured_peak": peak if status == "ok" else "", "measured_ms": seconds * 1e3 if status == "ok" else "",
               "throughput": self.args.batch / seconds if status == "ok" else "",
               "predicted_peak": info["predicted_peak"] if info else "",
               "predicted_ms": info["predicted_time_ms"] if info else "", "note": note}
        self.rows.append(row)
        text = (f"peak {peak / 2**20:10.2f} MiB  {row['throughput']:8.3f} img/s" if status == "ok" else status)
        if info:
            text += f"  (predicted {info['predicted_peak'] / 2**20:.2f} MiB, {info['predicted_time_ms']:.1f} ms)"
        print(f"{strategy:10s} {str(parameter):>14s}  {text}  {note}", flush=True)

    def run_point(self, strategy: str, parameter, step_factory: Callable[[], Callable],
                  info: Optional[Dict] = None) -> None:
        """Measures one point; out of memory is recorded, not raised."""
        try:
            seconds, peak = measure(step_factory(), self.device, self.args.runs, self.args.min_seconds, self.steps)
        except RuntimeError as error:
            if not is_out_of_memory(error):
                raise
            seconds = None  # release after the except block: its traceback holds the step's tensors
        if seconds is None:
            release_memory(self.device)
            self.record(strategy, parameter, "oom", info=info)
        else:
            self.record(strategy, parameter, "ok", seconds, peak, info)

    def jitckpt_point(self, scripted, x, strategy: str, parameter, reuse, **kwargs) -> Optional[Dict]:
        try:
            model = jitckpt.checkpoint(scripted, (x,), strategy=strategy, reuse_profile_of=reuse, **kwargs)
        except RuntimeError as error:
            first = str(error).strip().splitlines()[0]
            status = "oom" if is_out_of_memory(error) else "infeasible"
            model = None
        if model is None:
            release_memory(self.device)
            self.record(strategy, parameter, status, note=first[:160])
            return None
        info = jitckpt.plan(model)
        self.run_point(strategy, parameter, lambda: make_step(model, x, list(model.parameters())), info)
        return info

    def run(self) -> None:
        args, device = self.args, self.device
        scripted, eager = zoo.build(args.model, device)
        parameters = list(scripted.parameters())
        torch.manual_seed(1)
        x = torch.randn(args.batch, 3, args.image, args.image, device=device)
        print(f"{self.name}: torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
              + (f", {torch.cuda.get_device_name()}" if device.startswith("cuda") else ""), flush=True)

        plain_step = make_step(scripted, x, parameters)
        try:
            plain_step()
            self.steps = steps_per_run(plain_step, device, args.min_seconds)
        except RuntimeError as error:
            if not is_out_of_memory(error):
                raise
        if self.steps is None:  # plain does not fit: every point calibrates its own runs
            release_memory(device)
        self.run_point("plain", "", lambda: plain_step)

        # Reentrant checkpointing (1.13's only form) needs an input that requires grad.
        x_seq = x.clone().requires_grad_(True) if uses_reentrant_checkpoint() else x
        for k in segment_counts(len(eager)):
            self.run_point("sequential", k, lambda k=k: make_step(sequential_forward(eager, k), x_seq, parameters))

        profiled = jitckpt.checkpoint(scripted, (x,), memory_limit=None, profile_repeats=args.profile_repeats)
        first = jitckpt.plan(profiled)
        profiled_step = make_step(profiled, x, parameters)
        self.run_point("optimal", "unconstrained", lambda: profiled_step, first)
        if self.steps is not None and self.rows[-1]["status"] == "ok" and args.paired_rounds > 0:
            self.paired_overhead = paired_ratio(plain_step, profiled_step, device, self.steps, args.paired_rounds)
            print(f"paired time ratio, jitckpt unconstrained / plain: x{self.paired_overhead:.3f}", flush=True)
        del plain_step, profiled_step
        for k in segment_counts(first["num_stages"]):
            self.jitckpt_point(scripted, x, "periodic", k, profiled, memory_limit=None, segments=k)
        peak = first["unconstrained_peak"]
        for i in range(1, args.limits + 1):
            limit = int(peak * i / args.limits)
            self.jitckpt_point(scripted, x, "revolve", limit, profiled, memory_limit=limit)
            self.jitckpt_point(scripted, x, "optimal", limit, profiled, memory_limit=limit)

        config = functorch_config()
        budgets = [float(b) for b in args.compile_budgets.split(",") if b]
        if config is None:
            print("compile: skipped, this PyTorch has no torch._functorch.config.activation_memory_budget")
        for budget in budgets if config is not None else []:
            torch._dynamo.reset()
            saved = config.activation_memory_budget
            config.activation_memory_budget = budget  # read when the first step compiles
            try:
                compiled = torch.compile(eager)
                self.run_point("compile", budget, lambda: make_step(compiled, x, parameters))
            finally:
                config.activation_memory_budget = saved
        self.write(first["num_stages"], len(eager))

    def write(self, stages: int, sequential_length: int) -> None:
        args = self.args
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"{self.name}.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(self.rows)
        figures = summary.summarize(self.rows, self.paired_overhead)
        print("\n" + "\n".join(summary.describe(figures)))
        settings = {k: v for k, v in vars(args).items() if k != "out"}
        settings.update({"name": self.name, "torch": torch.__version__, "threads": torch.get_num_threads(),
                         "machine": platform.node(), "jitckpt_stages": stages, "sequential_length": sequential_length,
                         "steps_per_run": self.steps, "command": "bench/models_bench.py " + " ".join(sys.argv[1:])})
        if self.device.startswith("cuda"):
            settings["gpu"] = torch.cuda.get_device_name()
        with open(os.path.join(args.out, f"{self.name}.json"), "w") as f:
            json.dump({"settings": settings, "rows": self.rows, "summary": figures}, f, indent=1)
        plot(self.rows, f"{args.model}, {args.image}x{args.image}, batch {args.batch}, {self.device}",
             os.path.join(args.out, f"{self.name}.png"))


def draw(ax, rows: List[Dict], title: str) -> None:
    """Throughput against peak memory, one series per strategy, shaped like the paper's figures;
    points that ran out of memory or could not meet their limit are left off."""
    peaks = [r["measured_peak"] for r in rows if r["status"] == "ok"]
    unit, scale = ("GiB", 2**30) if peaks and max(peaks) >= 2**30 else ("MiB", 2**20)
    for strategy, (marker, color) in STYLES.items():
        points = sorted((r["measured_peak"] / scale, r["throughput"]) for r in rows
                        if r["strategy"] == strategy and r["status"] == "ok")
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker, color=color, label=strategy)
    ax.set_xlabel(f"peak memory of a training step ({unit})")
    ax.set_ylabel("throughput (images/s)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def plot(rows: List[Dict], title: str, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    draw(ax, rows, title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", help="see bench/zoo.py")
    parser.add_argument("--image", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--runs", type=int, default=5, help="timed runs; the median is kept")
    parser.add_argument("--min-seconds", type=float, default=0.5, help="length of a timed run of plain")
    parser.add_argument("--limits", type=int, default=10, help="memory limits for optimal and revolve")
    parser.add_argument("--profile-repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="intra-op CPU threads (0: one per core)")
    parser.add_argument("--paired-rounds", type=int, default=7,
                        help="alternating rounds timing plain against jitckpt unconstrained (0: none)")
    parser.add_argument("--compile-budgets", default="0.2,0.4,0.6,0.8,1.0",
                        help="activation_memory_budget values for torch.compile ('' for none)")
    parser.add_argument("--out", default="bench/results/cpu")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this PyTorch sees no CUDA device")
    warnings.filterwarnings("ignore", category=UserWarning)
    use_threads(args.threads)
    Experiment(args).run()


if __name__ == "__main__":
    main()
