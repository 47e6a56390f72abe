"""Transformers under jitckpt: a 12-block GPT-style decoder (causal mask and positions built in
forward) and nn.TransformerEncoder (6 layers, padding mask), d 256, 4 heads, sequence 256,
batch 4 (test/models/families.py's "bench" sizes).

    PYTHONPATH=build/python /usr/bin/python3 bench/transformer_bench.py
    PYTHONPATH=build/python /usr/bin/python3 bench/transformer_bench.py --size small --steps 3   # smoke run

Per model, three points:
  plain     the scripted model under TorchScript's executor, no checkpointing
  smallest  jitckpt at the smallest limit that works (memory_limit="min", exact to the byte);
            goal: a measured peak at most 25% of plain's (GPT), 35% (encoder)
  half      jitckpt at 50% of the unconstrained activation peak; goal: at most x1.25 plain's time

Each point: warm-up steps (gradients, TorchScript's profiling runs), then the peak of one step
above what was held before it (CPU: jitckpt's counting allocator, exact; CUDA: the caching
allocator's allocated-bytes peak), as bench/common.py measures it. Then --steps rounds, each
timing one run of --run-steps steps of every point back to back, the order rotating from round
to round: a point's time is the median over the rounds, its time ratio the median over rounds of
its time / plain's time in the same round, so slow spells of the machine cancel.

Writes <out> (CSV, default bench/results/<device>/transformers.csv), and beside it a .json
(settings, rows) and a .png (step time against measured peak, with jitckpt's predicted curve).
Any test/models/families.py family can be added with --models (no goals for those).
"""
import argparse
import csv
import os
import platform
import statistics
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import families
import jitckpt
import records
from common import TrainingStep, is_out_of_memory, pyplot, release_memory, step_peak, timed_run, use_threads

# Short name -> (family, goal for the smallest point's peak ratio to plain).
MODELS = {"gpt": ("gpt_mask_builtin", 0.25), "encoder": ("transformer_encoder", 0.35)}
HALF_TIME_GOAL = 1.25
SIZES = {"small": "test", "full": "bench", "large": "large"}
FIELDS = ["model", "family", "point", "status", "num_stages", "blocks", "limit_bytes", "predicted_peak",
          "measured_peak", "peak_ratio", "peak_goal", "predicted_ms", "median_ms", "time_ratio", "time_goal",
          "meets_goal", "note"]


def family_step(model: Callable, family: families.Family, parameters: List[torch.Tensor]) -> TrainingStep:
    """One training step with the family's inputs and loss (see common.TrainingStep)."""
    return TrainingStep(lambda: family.loss(model(*family.inputs)), parameters)


@dataclass
class Point:
    model: str
    family: families.Family
    point: str
    status: str = "ok"  # "ok", "oom", "infeasible" (no schedule fits) or "error" (jitckpt failed)
    info: Optional[Dict] = None  # jitckpt's plan
    note: str = ""
    step: Optional[Callable[[], None]] = None
    peak: int = 0
    timings: List[float] = field(default_factory=list)  # seconds per step, one per round
    ratios: List[float] = field(default_factory=list)  # against plain, same round


def prepare(point: Point, model: torch.jit.ScriptModule, device: str, warmup: int) -> Point:
    """Warm-up steps and the measured peak of one step; out of memory is recorded, not raised."""
    step = family_step(model, point.family, list(model.parameters()))
    try:
        for _ in range(warmup):
            step()
        point.peak = step_peak(step, device)
        point.step = step
    except RuntimeError as error:
        if not is_out_of_memory(error):
            raise
        point.status = "oom"
    if point.status == "oom":
        step = None
        release_memory(device)
    return point


def jitckpt_point(name: str, family: families.Family, point: str, limit, profiled, device: str,
                  warmup: int) -> Point:
    try:
        model = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=limit, reuse_profile_of=profiled)
    except RuntimeError as error:
        release_memory(device)
        return Point(name, family, point, status=status_of(error), note=first_line(error))
    return prepare(Point(name, family, point, info=jitckpt.plan(model)), model, device, warmup)


def status_of(error: RuntimeError) -> str:
    if is_out_of_memory(error):
        return "oom"
    return "infeasible" if "no checkpointing schedule fits" in str(error) else "error"


def first_line(error: RuntimeError) -> str:
    """The line that says what failed (for TorchScript's traceback, its last line)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return (lines[-1] if lines[0].startswith("The following operation failed") else lines[0])[:160]


def time_rounds(points: List[Point], device: str, rounds: int, run_steps: int) -> None:
    """Each round times one run of every point back to back, the order rotating between rounds,
    after an untimed round that brings every point back to its steady state."""
    live = [p for p in points if p.step is not None]
    for point in live:
        timed_run(point.step, device, run_steps)
    for r in range(rounds):
        shift = r % max(1, len(live))
        this_round = {}
        for point in live[shift:] + live[:shift]:
            this_round[point.point] = timed_run(point.step, device, run_steps)
            point.timings.append(this_round[point.point])
        if "plain" in this_round:
            for point in live:
                point.ratios.append(this_round[point.point] / this_round["plain"])
        print(f"  round {r + 1}/{rounds}: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in this_round.items()),
              flush=True)
    for point in points:
        point.step = None


def run_model(name: str, family_name: str, peak_goal: Optional[float], args: argparse.Namespace) -> List[Dict]:
    device = args.device
    family = families.FAMILIES[family_name](SIZES[args.size], device)
    print(f"{name}: {family.description}, inputs {[tuple(t.shape) for t in family.inputs]}", flush=True)

    plain = prepare(Point(name, family, "plain"), family.make(0), device, args.warmup)

    try:
        profiled = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None,
                                      profile_repeats=args.profile_repeats)
    except RuntimeError as error:  # recorded, so that the other points and models still run
        release_memory(device)
        first = {"curve": []}
        points = [plain] + [Point(name, family, p, status=status_of(error), note=first_line(error))
                            for p in ("smallest", "half")]
    else:
        first = jitckpt.plan(profiled)
        print(f"  {first['num_stages']} stages for {family.blocks} blocks; unconstrained activation peak "
              f"{first['unconstrained_peak'] / 2**20:.2f} MiB", flush=True)
        points = [plain,
                  jitckpt_point(name, family, "smallest", "min", profiled, device, args.warmup),
                  jitckpt_point(name, family, "half", 0.5, profiled, device, args.warmup)]
        del profiled
    for p in points:
        print(f"  {p.point:9s} " + (f"peak {p.peak / 2**20:9.2f} MiB" if p.status == "ok" else p.status)
              + (f"  (limit {p.info['memory_limit'] / 2**20:.2f} MiB, predicted {p.info['predicted_peak'] / 2**20:.2f}"
                 f" MiB, {p.info['predicted_time_ms']:.1f} ms)" if p.info else "") + (f"  {p.note}" if p.note else ""),
              flush=True)
    time_rounds(points, device, args.steps, args.run_steps)

    rows = []
    for p in points:
        ok = p.status == "ok" and bool(p.timings)
        peak_ratio = p.peak / plain.peak if ok and plain.status == "ok" and plain.peak else None
        time_ratio = statistics.median(p.ratios) if ok and p.ratios else None
        goal_peak = peak_goal if p.point == "smallest" else None
        goal_time = HALF_TIME_GOAL if p.point == "half" else None
        meets = ""
        if goal_peak is not None and peak_ratio is not None:
            meets = peak_ratio <= goal_peak
        elif goal_time is not None and time_ratio is not None:
            meets = time_ratio <= goal_time
        rows.append({"model": name, "family": family_name, "point": p.point, "status": p.status,
                     "num_stages": p.info["num_stages"] if p.info else "", "blocks": family.blocks,
                     "limit_bytes": p.info["memory_limit"] if p.info else "",
                     "predicted_peak": p.info["predicted_peak"] if p.info else "",
                     "measured_peak": p.peak if ok else "", "peak_ratio": peak_ratio if peak_ratio is not None else "",
                     "peak_goal": goal_peak if goal_peak is not None else "",
                     "predicted_ms": p.info["predicted_time_ms"] if p.info else "",
                     "median_ms": statistics.median(p.timings) * 1e3 if ok else "",
                     "time_ratio": time_ratio if time_ratio is not None else "",
                     "time_goal": goal_time if goal_time is not None else "", "meets_goal": meets, "note": p.note,
                     "_curve": first["curve"]})
    return rows


def table(rows: List[Dict]) -> str:
    def fmt(value, spec: str) -> str:  # spec: width, then precision and type
        return f"{'-':>{spec.split('.')[0]}}" if value in ("", None) else format(value, spec)

    lines = [f"{'model':9s} {'point':9s} {'stages':>6s} {'peak MiB':>9s} {'x plain':>8s} {'ms/step':>9s} "
             f"{'x plain':>8s}  goal"]
    for r in rows:
        goal = ""
        if r["peak_goal"] != "":
            goal = f"peak <= {r['peak_goal']:.0%} of plain: {'yes' if r['meets_goal'] else 'NO'}"
        elif r["time_goal"] != "":
            goal = f"time <= x{r['time_goal']:.2f}: {'yes' if r['meets_goal'] else 'NO'}"
        if r["status"] != "ok":
            goal = f"{r['status']} {r['note'][:60]}"
        peak = r["measured_peak"] / 2**20 if r["measured_peak"] != "" else ""
        lines.append(f"{r['model']:9s} {r['point']:9s} {str(r['num_stages']):>6s} {fmt(peak, '9.2f')} "
                     f"{fmt(r['peak_ratio'], '8.3f')} {fmt(r['median_ms'], '9.1f')} {fmt(r['time_ratio'], '8.3f')}  {goal}")
    return "\n".join(lines)


def plot(rows: List[Dict], title: str, path: str) -> None:
    plt = pyplot()
    if plt is None:
        return
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4.2), squeeze=False)
    markers = {"plain": ("s", "red"), "smallest": ("v", "blue"), "half": ("^", "green")}
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if r["model"] == model]
        ok = [r for r in mine if r["status"] == "ok" and r["measured_peak"] != ""]
        for r in ok:
            marker, color = markers.get(r["point"], ("o", "gray"))
            ax.plot(r["measured_peak"] / 2**20, r["median_ms"], marker, color=color, markersize=8,
                    label=f"{r['point']} (measured)")
        curve = mine[0]["_curve"] if mine else []
        if curve:
            ax.plot([c[0] / 2**20 for c in curve], [c[1] for c in curve], ".--", color="gray", linewidth=1,
                    label="jitckpt predicted (activation limit)")
        ax.set_xlabel("peak memory of a training step (MiB)")
        ax.set_ylabel("time per step (ms)")
        ax.set_title(f"{model} ({mine[0]['family']})" if mine else model)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gpt,encoder",
                        help="comma-separated: gpt, encoder, or any test/models/families.py family")
    parser.add_argument("--size", choices=list(SIZES), default="full",
                        help="full: the sizes above; small: the tests' tiny sizes, for a quick smoke run; "
                             "large: sequence 1024, d 1024, 16 heads, 12 blocks, batch 8 (a GPU's size)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--steps", type=int, default=7, help="timing rounds; each point's median is kept")
    parser.add_argument("--run-steps", type=int, default=1, help="steps per timed run (raise on a fast GPU)")
    parser.add_argument("--warmup", type=int, default=3, help="steps before a point's peak is measured")
    parser.add_argument("--profile-repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="intra-op CPU threads (0: one per core)")
    parser.add_argument("--out", default=None, help="CSV path (default bench/results/<device>/transformers.csv)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this PyTorch sees no CUDA device")
    kind = "gpu" if args.device.startswith("cuda") else "cpu"
    out = args.out or os.path.join("bench", "results", kind, "transformers.csv")
    warnings.filterwarnings("ignore", category=UserWarning)
    threads = use_threads(args.threads)
    print(f"torch {torch.__version__}, {threads} CPU threads"
          + (f", {torch.cuda.get_device_name()}" if kind == "gpu" else "") + f", size {args.size}", flush=True)

    rows: List[Dict] = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        family_name, goal = MODELS.get(name, (name, None))
        if family_name not in families.FAMILIES:
            raise SystemExit(f"unknown model '{name}': use {', '.join(MODELS)} or one of {', '.join(families.FAMILIES)}")
        rows += run_model(name, family_name, goal, args)

    print("\n" + table(rows))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    base = os.path.splitext(out)[0]
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    settings.update({"torch": torch.__version__, "threads": threads, "machine": platform.node(),
                     "command": "bench/transformer_bench.py " + " ".join(sys.argv[1:])})
    if kind == "gpu":
        settings["gpu"] = torch.cuda.get_device_name()
    with open(base + ".json", "w") as f:
        records.dump({"settings": settings, "rows": [{k: r[k] for k in FIELDS} for r in rows]}, f)
    plot(rows, f"transformers, {args.device}, threads {threads}, size {args.size}", base + ".png")
    print(f"wrote {out}, {base}.json, {base}.png")


if __name__ == "__main__":
    main()
