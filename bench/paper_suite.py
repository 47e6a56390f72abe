"""The paper's experiment (section 5) over a suite of models: runs bench/models_bench.py once per
experiment, each in a process of its own (a crash loses one experiment, not the suite, and each
starts with a clean allocator), then writes the suite's summary.

    PYTHONPATH=build/python /usr/bin/python3 bench/paper_suite.py cpu    (scripts/bench.sh cpu)
    PYTHONPATH=build-cuda/python python3 bench/paper_suite.py gpu        (scripts/bench.sh gpu)

Suites: "cpu", sizes where activations outweigh the parameters' gradients, as in the paper (about
20 minutes per experiment on a 2-core machine); "cpu-small", the first, smaller sizes (minutes per
experiment); "gpu", the paper's
Figures 4 and 5 (ResNet-101 at 1000x1000, batch 1 to 8; ResNet-1001 at 224, batch 1 to 8) and
DenseNet-121 and Inception v3 at 500x500. Arguments after the suite's options go to every
models_bench.py run (--runs 3, --compile-budgets '', ...).

Writes <out>/<experiment>.{json,png}, <out>/summary.md, <out>/summary.json and
<out>/summary.png (every experiment's plot on one page).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

import records
import summary
from models_bench import draw

HERE = os.path.dirname(os.path.abspath(__file__))

# (model, image side, batch, extra models_bench.py arguments; the command line's come after and win)
FEW_COMPILE_BUDGETS = ["--compile-budgets", "0.3,1.0"]  # Inductor compiles 333 blocks per budget
# "cpu": sizes where the activations are several times the parameters' gradients, as on the paper's
# GPU (profiled sum of abar over the gradients: ResNet-50 6.7x, ResNet-101 2.8x, ResNet-18 7.3x,
# DenseNet-121 9.5x, Inception v3 6.8x), about 20 minutes each on the 2-core VM. "cpu-small": the
# first suite's sizes (minutes each), where ResNet's gradients outweigh its activations.
SUITES = {
    "cpu": [("resnet50", 224, 8, []), ("resnet101", 224, 4, []), ("resnet18", 224, 16, []),
            ("densenet121", 160, 4, []), ("inception_v3", 299, 4, [])],
    "cpu-small": [("resnet18", 128, 8, []), ("resnet50", 96, 4, []), ("resnet101", 96, 4, []),
                  ("densenet121", 96, 4, []), ("inception_v3", 128, 4, [])],
    "gpu": [("resnet101", 1000, b, []) for b in (1, 2, 4, 8)]
           + [("resnet1001", 224, b, FEW_COMPILE_BUDGETS) for b in (1, 2, 4, 8)]
           + [("densenet121", 500, 8, []), ("inception_v3", 500, 8, [])],
}


def experiment_name(model: str, image: int, batch: int, device: str) -> str:
    return f"{model}-{image}px-batch{batch}-{device}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--out", help="default: bench/results/<suite>")
    parser.add_argument("--only", default="", help="run only experiments whose name contains this")
    parser.add_argument("--skip-done", action="store_true", help="keep experiments whose results exist")
    parser.add_argument("--summary-only", action="store_true", help="summarize the results already there")
    args, passthrough = parser.parse_known_args()
    device = "cuda" if args.suite == "gpu" else "cpu"
    out = args.out or os.path.join("bench", "results", args.suite)
    os.makedirs(out, exist_ok=True)
    experiments = [e for e in SUITES[args.suite] if args.only in experiment_name(*e[:3], device)]

    failed = []
    for model, image, batch, extra in experiments if not args.summary_only else []:
        name = experiment_name(model, image, batch, device)
        if args.skip_done and os.path.exists(os.path.join(out, f"{name}.json")):
            print(f"== {name}: results exist, kept", flush=True)
            continue
        command = [sys.executable, os.path.join(HERE, "models_bench.py"), "--model", model, "--image", str(image),
                   "--batch", str(batch), "--device", device, "--out", out] + extra + passthrough
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        start = time.time()
        code = subprocess.call(command)
        print(f"== {name}: exit {code} after {time.time() - start:.0f} s", flush=True)
        if code != 0:
            failed.append(name)

    write_summary(out, args.suite, device, passthrough)
    if failed:
        raise SystemExit(f"failed experiments: {', '.join(failed)}")


def write_summary(out: str, suite: str, device: str, passthrough: List[str]) -> None:
    results = []
    for model, image, batch, _ in SUITES[suite]:
        path = os.path.join(out, f"{experiment_name(model, image, batch, device)}.json")
        if os.path.exists(path):
            with open(path) as f:
                results.append(json.load(f))
    if not results:
        print("no results to summarize")
        return
    pooled = [r for result in results for r in result["rows"]]
    errs = summary.errors(pooled)

    def mean_of(values: List) -> object:
        values = [v for v in values if v is not None]
        return statistics.mean(values) if values else None

    total = {
        "experiments": len(results),
        "gain": {b: mean_of([res["summary"]["gain"][b]["mean"] for res in results]) for b in summary.BASELINES},
        "paper_gain": mean_of([res["summary"]["paper_gain"] for res in results]),
        "mape_peak": mean_of([e["peak"] for e in errs]),
        "mape_time": mean_of([e["time"] for e in errs]),
        "predicted_points": len(errs),
        "overhead_time": mean_of([(res["summary"]["overhead"] or {}).get("time") for res in results]),
        "paired_overhead": mean_of([res["summary"].get("paired_overhead") for res in results]),
        "noise": mean_of([(res["summary"].get("noise") or {}).get("mean_spread") for res in results]),
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        records.dump(total, f)

    def pct(v, signed=True):
        return "n/a" if v is None else (f"{100 * v:+.1f}%" if signed else f"{100 * v:.1f}%")

    settings = results[0]["settings"]
    lines = [f"# Paper protocol, suite '{suite}'", "",
             f"Command: `scripts/bench.sh {suite}{' ' + ' '.join(passthrough) if passthrough else ''}` "
             f"(bench/paper_suite.py; each experiment's own command is in its .json).",
             f"PyTorch {settings['torch']}, {settings['threads']} CPU threads"
             + (f", {settings['gpu']}" if "gpu" in settings else "") + ".", "",
             "| experiment | stages / Seq. length | plain peak | plain img/s | gain vs sequential | gain vs periodic "
             "| paper's gain | MAPE peak | MAPE time | overhead (time) | paired overhead | noise |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        s, st = res["summary"], res["settings"]
        plain = [r for r in res["rows"] if r["strategy"] == "plain"][0]
        plain_peak = f"{plain['measured_peak'] / 2**20:.1f} MiB" if plain["status"] == "ok" else plain["status"]
        plain_tp = f"{plain['throughput']:.2f}" if plain["status"] == "ok" else "-"
        over = f"x{s['overhead']['time']:.3f}" if s["overhead"] else "n/a"
        paired = f"x{s['paired_overhead']:.3f}" if s.get("paired_overhead") else "n/a"
        spread = pct((s.get("noise") or {}).get("mean_spread"), False)
        lines.append(f"| {st['name']} | {st['jitckpt_stages']} / {st['sequential_length']} | {plain_peak} | {plain_tp} "
                     f"| {pct(s['gain']['sequential']['mean'])} | {pct(s['gain']['periodic']['mean'])} "
                     f"| {pct(s['paper_gain'])} | {pct(s['mape_peak'], False)} | {pct(s['mape_time'], False)} | {over} "
                     f"| {paired} | {spread} |")
    over = f"x{total['overhead_time']:.3f}" if total["overhead_time"] is not None else "n/a"
    paired = f"x{total['paired_overhead']:.3f}" if total["paired_overhead"] is not None else "n/a"
    lines += ["", f"Over {total['experiments']} experiments: mean gain of optimal over the best "
              f"checkpoint_sequential at equal or lower peak {pct(total['gain']['sequential'])}, over jitckpt "
              f"periodic {pct(total['gain']['periodic'])}; the paper's figure {pct(total['paper_gain'])} "
              f"(paper, V100: +17.2%). MAPE over {total['predicted_points']} jitckpt points: peak "
              f"{pct(total['mape_peak'], False)} (paper: 3.7%), time {pct(total['mape_time'], False)} (paper: 7.8%). "
              f"jitckpt unconstrained against plain TorchScript: time {over} on average between separate points, "
              f"{paired} in alternating rounds (target: at most x1.02). Identical schedules measured at different "
              f"points spread by {pct(total['noise'], False)} on average: smaller differences are noise.",
              "", "Definitions: bench/summary.py. Per experiment: <experiment>.{json,png} beside this file."]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot_all(results, os.path.join(out, "summary.png"))


def plot_all(results: List[Dict], path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    cols = min(3, len(results))
    rows = math.ceil(len(results) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax, res in zip(axes.flat, results):
        st = res["settings"]
        draw(ax, res["rows"], f"{st['model']}, {st['image']}px, batch {st['batch']}")
    for ax in list(axes.flat)[len(results):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
