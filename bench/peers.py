"""jitckpt beside what a PyTorch 2.x user picks first to train in less memory: torch.compile's
activation memory budget and selective activation checkpointing, paired at equal measured peak.

    PYTHONPATH=build/python /usr/bin/python3 bench/peers.py --models gpt,encoder,resnet18:224:16 \
        --out bench/results/cpu/peers
    ... bench/peers.py --models gpt --size test --rounds 2 --compile-budgets 0.5   # smoke run

Models: gpt and encoder (bench/transformer_bench.py's GPT and nn.TransformerEncoder), llama, at
--size; test/models/zoo.py's CNNs as NAME[:IMAGE:BATCH]. Methods, each a series of points:
  eager        the eager model, no checkpointing: every time and peak ratio is against it
  torchscript  the scripted model under TorchScript's default executor
  compile      torch.compile of the eager model, torch._functorch.config.activation_memory_budget
               at each of --compile-budgets (PyTorch 2.4+)
  sac          the eager model with every block under torch.utils.checkpoint (non-reentrant), one
               point per --sac policy: full (each block recomputed whole), every2 (every second
               block, torchtitan's layer frequency 2), ops (outputs of matmuls, convolutions and
               attention kept, the rest recomputed), ops-half (ops with every second matmul
               recomputed too: torchtitan's op policy); ops and ops-half need PyTorch 2.4+
  jitckpt      the scripted model under jitckpt (--front-end export: the eager model, captured
               with torch.export): no limit, --limits fractions of its unconstrained peak, and
               "min" (one profile, reused)

Each point: two warm-up steps (the first one's seconds, with planning for jitckpt and tracing and
compiling for compile, are its first-step time), the peak of one step above what was held before
it (bench/common.py's step_peak), then --rounds rounds that time one run of eager and one of the
point back to back, the order alternating: its time ratio is the median of the rounds' ratios.
Every compile and sac point is then paired with jitckpt's optimal schedule at the same measured
peak (its limit: the peer's peak less what jitckpt's unconstrained step holds beyond its plan) and
the two timed against each other the same way: the speedup of optimal.

Summary per model: each method's deepest point (smallest measured peak) within 1.25x and 1.5x of
eager's time, and the paired speedups. Writes <out>/<model>-<device>[-<autocast>].json and .csv,
and <out>/summary.md over every result in <out> (--summarize: only that).
"""
import argparse
import csv
import json
import os
import platform
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch

import jitckpt
import peer_methods
import records
from common import (TrainingStep, is_out_of_memory, loss_of, paired_ratios, release_memory, step_peak,
                    threading_environment, use_threads)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import families
import zoo

TIME_BUDGETS = (1.25, 1.5)
FIELDS = ["model", "method", "parameter", "status", "measured_peak", "peak_ratio", "time_ratio", "time_ratio_min",
          "time_ratio_max", "first_step_s", "predicted_peak", "note"]
PAIRED_FIELDS = ["model", "peer", "parameter", "peer_peak", "optimal_limit", "optimal_peak", "status",
                 "speedup_median", "speedup_min", "speedup_max"]
TRANSFORMERS = {"gpt": families.gpt_mask_builtin, "encoder": families.transformer_encoder, "llama": families.llama}


@dataclass
class Subject:
    """A model to train: its eager form (fresh, same weights at every call), scripted form, inputs
    and loss."""
    name: str
    eager: Callable[[], torch.nn.Module]
    scripted: Callable[[], torch.jit.ScriptModule]
    inputs: tuple
    loss: Callable


def subject(spec: str, size: str, device: str) -> Subject:
    name, *shape = spec.split(":")
    if name in TRANSFORMERS:
        family = TRANSFORMERS[name](size, device)
        return Subject(name, lambda: family.eager(0), lambda: family.make(0), family.inputs, family.loss)
    image, batch = (int(shape[0]), int(shape[1])) if shape else (64, 8)
    torch.manual_seed(1)
    x = torch.randn(batch, 3, image, image, device=device)
    return Subject(f"{name}-{image}px-batch{batch}", lambda: zoo.eager(name, device),
                   lambda: zoo.build(name, device)[0], (x,), loss_of)


def failure(error: RuntimeError) -> str:
    """A point's status after its step failed: out of memory, a limit jitckpt cannot meet, or
    another error (its first line goes into the point's note)."""
    if is_out_of_memory(error):
        return "oom"
    return "infeasible" if "no checkpointing schedule fits" in str(error) else "error"


@dataclass
class Point:
    method: str
    parameter: str
    status: str = "ok"  # "ok", failure()'s, or "unavailable" (this PyTorch lacks the method)
    peak: int = 0
    first_step_s: float = 0.0
    ratios: List[float] = field(default_factory=list)  # time / eager's time, one per round
    predicted_peak: Optional[int] = None
    note: str = ""


class Comparison:
    def __init__(self, args: argparse.Namespace, subject: Subject):
        self.args, self.subject, self.device = args, subject, args.device
        self.points: List[Point] = []
        self.paired: List[Dict] = []
        self.eager_step = self.step_of(subject.eager())
        self.eager_step()
        self.eager_peak = step_peak(self.eager_step, self.device)

    def autocast(self):
        if self.args.autocast == "none":
            return torch.autocast(self.device.split(":")[0], enabled=False)
        return torch.autocast(self.device.split(":")[0], dtype=getattr(torch, self.args.autocast))

    def step_of(self, model: Callable) -> TrainingStep:
        def run():
            with self.autocast():
                output = model(*self.subject.inputs)
            return self.subject.loss(output)
        return TrainingStep(run, list(model.parameters()))

    def measure(self, method: str, parameter, make: Callable[[], Callable], predicted: Optional[int] = None) -> Point:
        """Builds the point's step, warms it up, measures its peak and its paired time ratio."""
        point = Point(method, str(parameter), predicted_peak=predicted)
        self.points.append(point)
        step = None
        try:
            start = time.perf_counter()
            step = make()
            step()
            point.first_step_s = time.perf_counter() - start
            step()
            point.peak = step_peak(step, self.device)
            point.ratios = paired_ratios(self.eager_step, step, self.device, 1, self.args.rounds)
        except RuntimeError as error:
            point.status, point.note, step = failure(error), str(error).strip().splitlines()[0][:160], None
        if point.status != "ok":
            release_memory(self.device)
        self.report(point)
        return point

    def report(self, point: Point) -> None:
        text = point.status if point.status != "ok" else (
            f"peak {point.peak / 2**20:9.2f} MiB (x{point.peak / self.eager_peak:.3f})  "
            f"time x{statistics.median(point.ratios):.3f}  first step {point.first_step_s:.1f} s")
        print(f"{self.subject.name:20s} {point.method:11s} {point.parameter:>9s}  {text}  {point.note}", flush=True)

    def jitckpt_step(self, limit, reuse) -> TrainingStep:
        with self.autocast():  # plans for the forward's autocast dtype
            export = self.args.front_end == "export"
            model = jitckpt.checkpoint(self.subject.eager() if export else self.subject.scripted(),
                                       self.subject.inputs, memory_limit=limit, reuse_profile_of=reuse,
                                       profile_repeats=self.args.profile_repeats, front_end=self.args.front_end,
                                       cuts=self.args.cuts)
        step = self.step_of(model)
        step.plan = jitckpt.plan(model)
        step.module = model
        return step

    def jitckpt_point(self, limit, reuse) -> Optional[TrainingStep]:
        made: List[TrainingStep] = []
        point = self.measure("jitckpt", "none" if limit is None else limit,
                             lambda: made.append(self.jitckpt_step(limit, reuse)) or made[0])
        point.predicted_peak = made[0].plan["predicted_peak"] if made else None
        return made[0] if made and point.status == "ok" else None

    def pair(self, peer: Point, peer_step: TrainingStep, profiled: TrainingStep, offset: int) -> None:
        """Optimal at the peer's measured peak, timed against the peer in alternating rounds."""
        row = {"model": self.subject.name, "peer": peer.method, "parameter": peer.parameter, "peer_peak": peer.peak,
               "optimal_limit": peer.peak - offset}
        try:
            optimal = self.jitckpt_step(max(1, peer.peak - offset), profiled.module)
            optimal()
            row["optimal_peak"] = step_peak(optimal, self.device)
            speedups = [1 / r for r in paired_ratios(peer_step, optimal, self.device, 1, self.args.rounds)]
            row.update({"status": "ok", "speedup_median": statistics.median(speedups),
                        "speedup_min": min(speedups), "speedup_max": max(speedups)})
            print(f"{self.subject.name:20s} paired {peer.method} {peer.parameter}: optimal x{row['speedup_median']:.3f} "
                  f"faster, peak {row['optimal_peak'] / 2**20:.2f} MiB against {peer.peak / 2**20:.2f}", flush=True)
        except RuntimeError as error:
            row["status"] = f"{failure(error)}: " + str(error).strip().splitlines()[0][:120]
            print(f"{self.subject.name:20s} paired {peer.method} {peer.parameter}: {row['status']}", flush=True)
        self.paired.append(row)

    def run(self) -> None:
        args = self.args
        print(f"{self.subject.name}: eager peak {self.eager_peak / 2**20:.2f} MiB", flush=True)
        self.measure("torchscript", "", lambda: self.step_of(self.subject.scripted()))
        profiled = self.jitckpt_point(None, None)
        if profiled is None:
            raise SystemExit(f"{self.subject.name}: jitckpt unconstrained failed; nothing to pair with")
        offset = self.points[-1].peak - profiled.plan["unconstrained_peak"]
        for limit in [float(f) for f in args.limits.split(",") if f] + ["min"]:
            self.jitckpt_point(limit, profiled.module)
        for method, parameter, make in peer_methods.peers(self.subject.eager, args.compile_budgets, args.sac):
            if make is None:  # this PyTorch lacks the method
                self.points.append(Point(method, parameter, "unavailable"))
                self.report(self.points[-1])
                continue
            steps: List[TrainingStep] = []
            point = self.measure(method, parameter, lambda: steps.append(self.step_of(make())) or steps[0])
            if point.status == "ok" and args.pair:
                self.pair(point, steps[0], profiled, offset)

    def rows(self) -> List[Dict]:
        out = []
        for p in [Point("eager", "", peak=self.eager_peak, ratios=[1.0])] + self.points:
            ok = p.status == "ok"
            out.append({"model": self.subject.name, "method": p.method, "parameter": p.parameter, "status": p.status,
                        "measured_peak": p.peak if ok else "", "peak_ratio": p.peak / self.eager_peak if ok else "",
                        "time_ratio": statistics.median(p.ratios) if ok else "",
                        "time_ratio_min": min(p.ratios) if ok else "", "time_ratio_max": max(p.ratios) if ok else "",
                        "first_step_s": p.first_step_s if ok and p.method != "eager" else "", "predicted_peak": p.predicted_peak or "",
                        "note": p.note})
        return out


def deepest(rows: List[Dict]) -> Dict[str, Dict[str, Optional[float]]]:
    """Per time budget, per method: the smallest peak ratio among its points within the budget."""
    out: Dict[str, Dict[str, Optional[float]]] = {}
    methods = sorted({r["method"] for r in rows}, key=[r["method"] for r in rows].index)
    for budget in TIME_BUDGETS:
        out[f"{budget}x"] = {m: min((r["peak_ratio"] for r in rows if r["method"] == m and r["status"] == "ok"
                                     and r["time_ratio"] <= budget), default=None) for m in methods}
    return out


def describe(name: str, summary: Dict, paired: List[Dict]) -> List[str]:
    lines = [f"{name}: deepest measured peak (x eager) within each time budget"]
    for budget, by_method in summary.items():
        cells = [f"{m} {'-' if v is None else f'{v:.3f}'}" for m, v in by_method.items()]
        lines.append(f"  {budget}: " + ", ".join(cells))
    for row in paired:
        if row["status"] == "ok":
            lines.append(f"  optimal at {row['peer']} {row['parameter']}'s peak: x{row['speedup_median']:.3f} "
                         f"[{row['speedup_min']:.3f}, {row['speedup_max']:.3f}]")
    return lines


def write(args: argparse.Namespace, comparison: Comparison) -> None:
    rows = comparison.rows()
    summary = deepest(rows)
    print("\n".join(describe(comparison.subject.name, summary, comparison.paired)), flush=True)
    suffix = ("" if args.autocast == "none" else f"-{args.autocast}") + (
        "-export" if args.front_end == "export" else "")
    base = os.path.join(args.out, f"{comparison.subject.name}-{args.device.split(':')[0]}{suffix}")
    os.makedirs(args.out, exist_ok=True)
    with open(base + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    settings.update({"torch": torch.__version__, "threads": torch.get_num_threads(), "machine": platform.node(),
                     "command": "bench/peers.py " + " ".join(sys.argv[1:]), "environment": threading_environment()})
    if args.device.startswith("cuda"):
        settings["gpu"] = torch.cuda.get_device_name()
    with open(base + ".json", "w") as f:
        records.dump({"settings": settings, "eager_peak": comparison.eager_peak, "rows": rows, "summary": summary,
                   "paired": comparison.paired}, f)


def summary_table(out: str) -> str:
    """A markdown table over every <model>.json in `out`: per model and method, the deepest point
    within each time budget, the first-step time, and optimal's paired speedups."""
    lines = ["| model | method | deepest peak within 1.25x / 1.5x eager's time (x eager) | first step (s) "
             "| optimal at the method's peaks: median speedup per point [range] |", "|---|---|---|---|---|"]
    for name in sorted(f for f in os.listdir(out) if f.endswith(".json")):
        with open(os.path.join(out, name)) as f:
            result = json.load(f)
        rows, model = result["rows"], name[:-len(".json")]
        for method in dict.fromkeys(r["method"] for r in rows):
            depth = " / ".join("-" if result["summary"][f"{b}x"].get(method) is None
                               else f"{result['summary'][f'{b}x'][method]:.3f}" for b in TIME_BUDGETS)
            firsts = [r["first_step_s"] for r in rows
                      if r["method"] == method != "eager" and r["first_step_s"] != ""]
            first = f"{min(firsts):.1f}-{max(firsts):.1f}" if firsts else ""
            pairs = ", ".join(f"{p['parameter']} x{p['speedup_median']:.3f} [{p['speedup_min']:.2f}, "
                              f"{p['speedup_max']:.2f}]" if p["status"] == "ok" else f"{p['parameter']} {p['status']}"
                              for p in result["paired"] if p["peer"] == method)
            lines.append(f"| {model} | {method} | {depth} | {first} | {pairs} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gpt,encoder", help="comma-separated; see above")
    parser.add_argument("--size", default="bench", choices=["test", "bench", "large"], help="transformers' size")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--autocast", default="none", choices=["none", "bfloat16", "float16"])
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds per point")
    parser.add_argument("--limits", default="0.8,0.6,0.4,0.2", help="jitckpt's limits besides none and min")
    parser.add_argument("--compile-budgets", default="1.0,0.5,0.3,0.1,0.0")
    parser.add_argument("--sac", default="full,every2,ops,ops-half", help="selective checkpointing policies")
    parser.add_argument("--profile-repeats", type=int, default=3)
    parser.add_argument("--front-end", default="script", choices=["script", "export"],
                        help="jitckpt takes the scripted model, or the eager one through torch.export")
    parser.add_argument("--cuts", default="cheapest", choices=["cheapest", "every"], help="jitckpt's cuts")
    parser.add_argument("--no-pair", dest="pair", action="store_false", help="no paired optimal points")
    parser.add_argument("--threads", type=int, default=0, help="intra-op CPU threads (0: one per core)")
    parser.add_argument("--no-onednn", action="store_true",
                        help="every method without oneDNN (Debian trixie's crashes in some convolution backwards)")
    parser.add_argument("--out", default="bench/results/cpu/peers")
    parser.add_argument("--summarize", action="store_true", help="only write <out>/summary.md from its results")
    args = parser.parse_args()
    if args.summarize:
        with open(os.path.join(args.out, "summary.md"), "w") as f:
            f.write(summary_table(args.out))
        return
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this PyTorch sees no CUDA device")
    warnings.filterwarnings("ignore", category=UserWarning)
    use_threads(args.threads)
    torch.backends.mkldnn.enabled = not args.no_onednn
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, {args.device}, autocast {args.autocast}")
    for spec in [s for s in args.models.split(",") if s]:
        comparison = Comparison(args, subject(spec, args.size, args.device))
        comparison.run()
        write(args, comparison)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(summary_table(args.out))


if __name__ == "__main__":
    main()
