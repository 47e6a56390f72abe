"""The paper's experiment (section 5): throughput against peak memory for a model, image size and
batch, one series per strategy. CPU mode (default) measures with the counting allocator;
on CUDA (--device cuda) with the caching allocator's peak.

    PYTHONPATH=build/python /usr/bin/python3 bench/models_bench.py --depth 18 --image 64 --batch 8 \
        --out bench/results/cpu

Strategies: plain TorchScript; torch.utils.checkpoint.checkpoint_sequential on the equivalent eager
nn.Sequential (2 to 2*sqrt(L) segments); jitckpt periodic (same segment counts) and revolve-style;
jitckpt optimal at 10 limits evenly spaced up to the unconstrained peak. Writes <out>/<name>.csv,
<out>/<name>.png and <out>/<name>-summary.txt.
"""
import argparse
import copy
import csv
import math
import os
import statistics
import time

import torch
import torch.utils.checkpoint

import jitckpt
from common import eager_sequential_resnet, fresh_copy, loss_of, scripted_resnet


def step_fn(model, x, parameters, device):
    def step():
        for p in parameters:
            if p.grad is not None:
                p.grad.zero_()
        loss_of(model(x)).backward()
        if device == "cuda":
            torch.cuda.synchronize()
    return step


def measure(step, device, runs, min_seconds):
    step()  # warm-up, allocates gradients
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        start_bytes = torch.cuda.memory_allocated()
        step()
        peak = torch.cuda.max_memory_allocated() - start_bytes
    else:
        with jitckpt.cpu_memory() as memory:
            step()
        peak = memory.peak
    start = time.perf_counter()
    step()
    steps = max(1, int(min_seconds / max(time.perf_counter() - start, 1e-6)))
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        timings.append((time.perf_counter() - start) / steps)
    return statistics.median(timings), peak


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depth", type=int, default=18)
    parser.add_argument("--image", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.5)
    parser.add_argument("--limits", type=int, default=10)
    parser.add_argument("--out", default="bench/results/cpu")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    name = f"resnet{args.depth}-{args.image}px-batch{args.batch}-{args.device}"
    device = args.device
    torch.manual_seed(0)
    x = torch.randn(args.batch, 3, args.image, args.image, device=device)
    base = scripted_resnet(args.depth).to(device)
    rows = []

    def record(strategy, parameter, seconds, peak, info=None):
        row = {"strategy": strategy, "parameter": parameter, "measured_peak": peak,
               "measured_ms": seconds * 1e3, "throughput": args.batch / seconds,
               "predicted_peak": info["predicted_peak"] if info else "",
               "predicted_ms": info["predicted_time_ms"] if info else ""}
        rows.append(row)
        print(f"{strategy:10s} {str(parameter):>12s}  peak {peak / 2**20:9.2f} MiB  "
              f"{row['throughput']:8.2f} img/s" + (f"  (predicted {info['predicted_peak'] / 2**20:.2f} MiB, "
                                                   f"{info['predicted_time_ms']:.1f} ms)" if info else ""), flush=True)

    plain = fresh_copy(base)
    record("plain", "", *measure(step_fn(plain, x, list(plain.parameters()), device), device, args.runs, args.min_seconds))

    torch.manual_seed(0)
    eager = eager_sequential_resnet(__import__("torchvision").models.__dict__[f"resnet{args.depth}"]()).to(device).train()
    length = len(eager)
    segment_counts = sorted({max(2, round(2 + i * (2 * math.sqrt(length) - 2) / 9)) for i in range(10)})
    xg = x.clone().requires_grad_(True)  # reentrant checkpointing needs an input that requires grad
    for k in segment_counts:
        seq_step = step_fn(lambda inp: torch.utils.checkpoint.checkpoint_sequential(eager, k, inp), xg,
                           list(eager.parameters()), device)
        record("sequential", k, *measure(seq_step, device, args.runs, args.min_seconds))

    def jitckpt_point(strategy, parameter, **kwargs):
        try:
            model = jitckpt.checkpoint(fresh_copy(base), (x,), strategy=strategy, profile_repeats=3, **kwargs)
        except RuntimeError as error:
            print(f"{strategy:10s} {str(parameter):>12s}  skipped: {str(error).splitlines()[0][:100]}")
            return
        info = jitckpt.plan(model)
        record(strategy, parameter, *measure(step_fn(model, x, list(model.parameters()), device), device,
                                             args.runs, args.min_seconds), info)
        return info

    unconstrained = jitckpt_point("optimal", "unconstrained", memory_limit=None)
    peak = unconstrained["unconstrained_peak"]
    for k in segment_counts:
        jitckpt_point("periodic", k, memory_limit=None, segments=k)
    for i in range(1, args.limits + 1):
        limit = int(peak * i / args.limits)
        jitckpt_point("revolve", limit, memory_limit=limit)
        jitckpt_point("optimal", limit, memory_limit=limit)

    with open(os.path.join(args.out, f"{name}.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)

    # Summary (paper, section 5.4).
    def best_at_or_below(strategy, memory):
        points = [r["throughput"] for r in rows if r["strategy"] == strategy and r["measured_peak"] <= memory]
        return max(points) if points else None

    lines = []
    for baseline in ("sequential", "periodic"):
        gains = []
        for r in rows:
            if r["strategy"] != baseline:
                continue
            optimal = best_at_or_below("optimal", r["measured_peak"])
            if optimal:
                gains.append(optimal / r["throughput"] - 1)
        if gains:
            lines.append(f"throughput gain of optimal over {baseline} at equal or lower measured memory: "
                         f"mean {100 * statistics.mean(gains):+.1f}% over {len(gains)} points")
    predicted = [r for r in rows if r["predicted_peak"] != ""]
    mape_peak = statistics.mean(abs(r["measured_peak"] - r["predicted_peak"]) / r["measured_peak"] for r in predicted)
    mape_time = statistics.mean(abs(r["measured_ms"] - r["predicted_ms"]) / r["measured_ms"] for r in predicted)
    lines.append(f"mean absolute percentage error, predicted vs measured: peak {100 * mape_peak:.1f}%, "
                 f"time {100 * mape_time:.1f}% over {len(predicted)} jitckpt points")
    plain_row = rows[0]
    unconstrained_row = next(r for r in rows if r["strategy"] == "optimal" and r["parameter"] == "unconstrained")
    lines.append(f"jitckpt at an unconstrained limit against plain TorchScript: time x"
                 f"{unconstrained_row['measured_ms'] / plain_row['measured_ms']:.3f}, "
                 f"peak x{unconstrained_row['measured_peak'] / plain_row['measured_peak']:.3f}")
    summary = "\n".join(lines)
    print("\n" + summary)
    with open(os.path.join(args.out, f"{name}-summary.txt"), "w") as f:
        f.write(f"command: PYTHONPATH=build/python /usr/bin/python3 bench/models_bench.py --depth {args.depth} "
                f"--image {args.image} --batch {args.batch} --device {args.device} --out {args.out}\n")
        f.write(summary + "\n")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        styles = {"plain": ("s", "red"), "sequential": ("x", "purple"), "periodic": ("+", "gray"),
                  "revolve": ("o-", "green"), "optimal": ("^-", "blue")}
        for strategy, (marker, color) in styles.items():
            points = sorted((r["measured_peak"] / 2**20, r["throughput"]) for r in rows if r["strategy"] == strategy)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker, color=color, label=strategy)
        ax.set_xlabel("peak memory (MiB)")
        ax.set_ylabel("throughput (images/s)")
        ax.set_title(f"ResNet-{args.depth}, {args.image}x{args.image}, batch {args.batch}, {args.device}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, f"{name}.png"), dpi=120)
    except ImportError:
        pass


if __name__ == "__main__":
    main()
