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

Each point: a warm-up step (it allocates the gradients) and the peak of one step above what was
held before it (CPU: jitckpt's counting allocator, exact; CUDA: the caching allocator's
allocated-bytes peak). Then the paper's median of --runs timed runs per point, each run as many
steps as make plain last --min-seconds (the paper: 5 runs, 500 ms), taken in rounds that time
one run of every point, so that slow spells of the machine fall on all points alike (torch.compile
points, which a budget change recompiles, are timed at once). Plain and jitckpt unconstrained are
also timed back to back in --paired-rounds alternating rounds: their ratio is the overhead.

Paired (--paired-rounds > 0): unpaired points of different strategies cannot say which is faster
when their gap is within the machine's drift, so every checkpoint_sequential and periodic point is
also paired with an optimal schedule at the same activation memory (periodic: its predicted peak,
same profile; checkpoint_sequential: its measured step peak less what the measured unconstrained
step holds beyond its predicted peak: the loss, and what the prologue and epilogue hold) and the two
are timed back to back in alternating rounds. The JSON's "paired" holds, per pair, the speedup
(baseline time / optimal time) median, min and max over the rounds, and both measured peaks.
A point that runs out of memory is recorded with status "oom" and left off the plot, as in the
paper; a limit that a strategy cannot meet, as "infeasible".

Writes <out>/<name>.json (settings, points, summary, pairs; one record a line) and <name>.png.
"""
import argparse
import inspect
import math
import os
import platform
import statistics
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch
import torch.utils.checkpoint

import jitckpt
import summary
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import zoo
import records
from common import (is_out_of_memory, make_step, pyplot, paired_ratio, paired_ratios, release_memory, step_peak,
                    steps_per_run, timed_run, use_threads)

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


def functorch_config():
    try:
        import torch._functorch.config as config
    except ImportError:
        return None
    return config if hasattr(config, "activation_memory_budget") else None


@dataclass
class Point:
    strategy: str
    parameter: object
    status: str = "ok"  # "ok", "oom" or "infeasible"
    info: Optional[Dict] = None  # jitckpt's plan: limit, predictions
    note: str = ""
    step: Optional[Callable] = None  # kept until timed
    factory: Optional[Callable] = None  # makes the step again (paired timing)
    steps: int = 1  # steps per timed run
    peak: int = 0
    timings: List[float] = field(default_factory=list)  # seconds per step, one per run


class Experiment:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.device = args.device
        self.name = f"{args.model}-{args.image}px-batch{args.batch}-{args.device.split(':')[0]}"
        self.points: List[Point] = []
        self.paired: List[Dict] = []
        self.steps: Optional[int] = None  # steps per timed run, fixed by plain (the paper's rule)
        self.paired_overhead: Optional[float] = None

    def prepare(self, strategy: str, parameter, step_factory: Callable[[], Callable],
                info: Optional[Dict] = None, interleave: bool = True) -> Point:
        """Warm-up and peak of one point, which is then timed with the others (interleave) or at
        once. Out of memory is recorded, not raised."""
        point = Point(strategy, parameter, info=info, factory=step_factory)
        self.points.append(point)
        try:
            step = step_factory()
            step()  # warm-up; allocates the gradients
            point.peak = step_peak(step, self.device)
            point.steps = self.steps or steps_per_run(step, self.device, self.args.min_seconds)
            if not interleave:
                point.timings = [timed_run(step, self.device, point.steps) for _ in range(self.args.runs)]
            else:
                point.step = step
        except RuntimeError as error:
            if not is_out_of_memory(error):
                raise
            point.status = "oom"  # release after the except block: its traceback holds the step's tensors
        if point.status == "oom":
            step = None
            release_memory(self.device)
        self.report(point)
        return point

    def time_interleaved(self) -> None:
        """The paper's median of `runs` runs per point, taken in rounds: each round times one run
        of every point, in an order rotated from round to round, so that slow spells of the
        machine fall on all points alike instead of on the few measured during them."""
        points = [p for p in self.points if p.step is not None]
        for r in range(self.args.runs):
            shift = r * len(points) // max(1, self.args.runs)
            for point in points[shift:] + points[:shift]:
                try:
                    point.timings.append(timed_run(point.step, self.device, point.steps))
                except RuntimeError as error:
                    if not is_out_of_memory(error):
                        raise
                    point.status = "oom"
            print(f"timing round {r + 1}/{self.args.runs} done", flush=True)
        for point in points:
            point.step = None
            if point.status == "oom":
                point.timings = []

    def report(self, point: Point) -> None:
        text = f"peak {point.peak / 2**20:10.2f} MiB" if point.status == "ok" else point.status
        if point.info:
            text += f"  (predicted {point.info['predicted_peak'] / 2**20:.2f} MiB, {point.info['predicted_time_ms']:.1f} ms)"
        print(f"{point.strategy:10s} {str(point.parameter):>14s}  {text}  {point.note}", flush=True)

    def rows(self) -> List[Dict]:
        out = []
        for p in self.points:
            ok = p.status == "ok" and bool(p.timings)
            seconds = statistics.median(p.timings) if ok else 0.0
            out.append({"strategy": p.strategy, "parameter": p.parameter, "status": p.status,
                        "limit_bytes": p.info["memory_limit"] if p.info else "",
                        "measured_peak": p.peak if ok else "", "measured_ms": seconds * 1e3 if ok else "",
                        "throughput": self.args.batch / seconds if ok else "",
                        "predicted_peak": p.info["predicted_peak"] if p.info else "",
                        "predicted_ms": p.info["predicted_time_ms"] if p.info else "", "note": p.note})
        return out

    def jitckpt_point(self, scripted, x, strategy: str, parameter, reuse, **kwargs) -> None:
        try:
            model = jitckpt.checkpoint(scripted, (x,), strategy=strategy, reuse_profile_of=reuse, **kwargs)
        except RuntimeError as error:
            first = str(error).strip().splitlines()[0]
            status = "oom" if is_out_of_memory(error) else "infeasible"
            model = None
        if model is None:
            release_memory(self.device)
            self.points.append(Point(strategy, parameter, status=status, note=first[:160]))
            self.report(self.points[-1])
            return
        self.prepare(strategy, parameter, lambda: make_step(model, x, list(model.parameters())), jitckpt.plan(model))

    def pair(self, baseline: Point, scripted, x, profiled, offset: int) -> None:
        """Optimal at the baseline's activation memory, timed against it in alternating rounds."""
        limit = baseline.info["predicted_peak"] if baseline.strategy == "periodic" else baseline.peak - offset
        row = {"baseline": baseline.strategy, "segments": baseline.parameter, "baseline_peak": baseline.peak,
               "optimal_limit": int(limit)}
        try:
            model = jitckpt.checkpoint(scripted, (x,), memory_limit=max(1, int(limit)), reuse_profile_of=profiled)
        except RuntimeError as error:
            row["status"] = "infeasible: " + str(error).strip().splitlines()[0][:120]
            self.paired.append(row)
            print(f"paired {baseline.strategy} {baseline.parameter}: {row['status']}", flush=True)
            return
        optimal = make_step(model, x, list(model.parameters()))
        optimal()
        base = baseline.factory()
        base()
        ratios = [1 / r for r in paired_ratios(base, optimal, self.device, self.steps or 1, self.args.paired_rounds)]
        row.update({"status": "ok", "optimal_peak": step_peak(optimal, self.device),
                    "optimal_predicted_peak": jitckpt.plan(model)["predicted_peak"],
                    "speedup_median": statistics.median(ratios), "speedup_min": min(ratios),
                    "speedup_max": max(ratios)})
        self.paired.append(row)
        print(f"paired {baseline.strategy:10s} {str(baseline.parameter):>4s}: optimal x{row['speedup_median']:.3f} "
              f"[{row['speedup_min']:.3f}, {row['speedup_max']:.3f}] faster, peak "
              f"{row['optimal_peak'] / 2**20:.2f} MiB against {row['baseline_peak'] / 2**20:.2f} MiB", flush=True)

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
        plain = self.prepare("plain", "", lambda: plain_step)

        # Reentrant checkpointing (1.13's only form) needs an input that requires grad.
        x_seq = x.clone().requires_grad_(True) if uses_reentrant_checkpoint() else x
        for k in segment_counts(len(eager), args.segment_counts):
            self.prepare("sequential", k, lambda k=k: make_step(sequential_forward(eager, k), x_seq, parameters))

        profiled = jitckpt.checkpoint(scripted, (x,), memory_limit=None, profile_repeats=args.profile_repeats)
        first = jitckpt.plan(profiled)
        unconstrained = self.prepare("optimal", "unconstrained", lambda: make_step(profiled, x, parameters), first)
        if plain.step is not None and unconstrained.step is not None and args.paired_rounds > 0:
            self.paired_overhead = paired_ratio(plain.step, unconstrained.step, device, self.steps,
                                                args.paired_rounds)
            print(f"paired time ratio, jitckpt unconstrained / plain: x{self.paired_overhead:.3f}", flush=True)
        for k in segment_counts(first["num_stages"], args.segment_counts):
            self.jitckpt_point(scripted, x, "periodic", k, profiled, memory_limit=None, segments=k)
        peak = first["unconstrained_peak"]
        for i in range(1, args.limits + 1):
            limit = int(peak * i / args.limits)
            self.jitckpt_point(scripted, x, "revolve", limit, profiled, memory_limit=limit)
            self.jitckpt_point(scripted, x, "optimal", limit, profiled, memory_limit=limit)
        self.time_interleaved()
        if args.paired_rounds > 0 and unconstrained.status == "ok":
            offset = unconstrained.peak - first["unconstrained_peak"]
            paired = [b for b in args.pair.split(",") if b]
            for point in [p for p in self.points if p.strategy in paired and p.status == "ok"]:
                self.pair(point, scripted, x, profiled, offset)

        # torch.compile: the budget is read when a step compiles, and a new budget needs a reset
        # that would recompile the earlier points under it: each is timed at once, not interleaved.
        config = functorch_config()
        budgets = [float(b) for b in args.compile_budgets.split(",") if b]
        if config is None:
            print("compile: skipped, this PyTorch has no torch._functorch.config.activation_memory_budget")
        for budget in budgets if config is not None else []:
            torch._dynamo.reset()
            saved = config.activation_memory_budget
            config.activation_memory_budget = budget
            try:
                compiled = torch.compile(eager)
                self.prepare("compile", budget, lambda: make_step(compiled, x, parameters), interleave=False)
            finally:
                config.activation_memory_budget = saved
        self.write(first["num_stages"], len(eager))

    def write(self, stages: int, sequential_length: int) -> None:
        args = self.args
        rows = self.rows()
        for r in rows:
            if r["status"] == "ok":
                print(f"{r['strategy']:10s} {str(r['parameter']):>14s}  peak {r['measured_peak'] / 2**20:10.2f} MiB  "
                      f"{r['measured_ms']:9.1f} ms  {r['throughput']:8.3f} img/s"
                      + (f"  (predicted {r['predicted_ms']:.1f} ms)" if r["predicted_ms"] != "" else ""))
        os.makedirs(args.out, exist_ok=True)
        figures = summary.summarize(rows, self.paired_overhead)
        print("\n" + "\n".join(summary.describe(figures)))
        settings = {k: v for k, v in vars(args).items() if k != "out"}
        settings.update({"name": self.name, "torch": torch.__version__, "threads": torch.get_num_threads(),
                         "machine": platform.node(), "jitckpt_stages": stages, "sequential_length": sequential_length,
                         "steps_per_run": self.steps, "command": "bench/models_bench.py " + " ".join(sys.argv[1:]),
                         # glibc's malloc settings move CPU step times (docs/usage.md)
                         "malloc": {k: v for k, v in os.environ.items()
                                    if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"}})
        if self.device.startswith("cuda"):
            settings["gpu"] = torch.cuda.get_device_name()
        if self.paired:
            figures["paired"] = summary.paired_summary(self.paired)
            print("\n".join(summary.describe_paired(figures["paired"])))
        with open(os.path.join(args.out, f"{self.name}.json"), "w") as f:
            records.dump({"settings": settings, "rows": rows, "summary": figures, "paired": self.paired}, f)
        plot(rows, f"{args.model}, {args.image}x{args.image}, batch {args.batch}, {self.device}",
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
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    draw(ax, rows, title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", help="see test/models/zoo.py")
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
    parser.add_argument("--segment-counts", type=int, default=10,
                        help="segment counts for checkpoint_sequential and periodic, 2 to 2*sqrt(L)")
    parser.add_argument("--pair", default="sequential,periodic",
                        help="baselines whose points are paired with optimal (comma-separated; '' for none): "
                             "fewer pairs fit a long model (ResNet-1001) into one device call")
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
