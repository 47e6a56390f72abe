"""The main job on a built-in example: a scripted torchvision ResNet-50 trained on the CPU.

Profiles, solves and trains a few steps at several limits (unconstrained, 50% of the unconstrained
peak or halfway to the smallest limit that works, and just above that smallest) for each strategy,
prints predicted against measured peak memory and time, checks that gradients are bit-identical to
the unmodified model, and plots time against peak. Every point is timed in the same alternating
rounds (the median of --rounds), so that the curve is the schedules', not the machine's drift.

    PYTHONPATH=build/python /usr/bin/python3 bench/demo.py --out build/demo
"""
import argparse
import csv
import os
import sys

import torch

import jitckpt
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import zoo
from common import fresh_copy, gradients, interleaved_times, make_step, step_peak, use_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depth", type=int, default=50)
    # Activations about 3x the parameters' gradients (332 against 97 MiB): a size where
    # checkpointing matters, as in the paper, and still a short run on 2 cores.
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image", type=int, default=160)
    parser.add_argument("--out", default="build/demo")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds; each times every point once")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    use_threads()
    torch.manual_seed(0)

    base, _ = zoo.build(f"resnet{args.depth}", "cpu")
    x = torch.randn(args.batch, 3, args.image, args.image)
    print(f"ResNet-{args.depth}, batch {args.batch}, {args.image}x{args.image}, CPU, {torch.get_num_threads()} threads")

    reference = gradients(fresh_copy(base), x)
    # One profile, reused for every limit and strategy.
    profiled = jitckpt.checkpoint(fresh_copy(base), (x,), memory_limit=None, profile_repeats=3, verbose=True)
    first = jitckpt.plan(profiled)
    smallest = first["curve"][0][0] / first["unconstrained_peak"]
    print(f"{first['num_stages']} stages; unconstrained peak (activations and the chain's parameter gradients) "
          f"{jitckpt._C.format_bytes(first['unconstrained_peak'])}; the smallest limit that works is {smallest:.0%} of it")
    # The parameter gradients the backward ends up holding are a floor no schedule goes below.
    fractions = [None, max(0.5, round((1 + smallest) / 2, 2)), max(0.25, round(smallest + 0.02, 2))]
    rows, steps = [], []
    for strategy in ["none", "optimal", "periodic", "revolve"]:
        for fraction in fractions if strategy != "none" else [None]:
            try:
                rewritten = jitckpt.checkpoint(fresh_copy(base), (x,), memory_limit=fraction, strategy=strategy,
                                               reuse_profile_of=profiled)
            except RuntimeError as error:
                print(f"  {strategy:9s} {'unconstrained' if fraction is None else f'{fraction:.0%}'}: "
                      f"{str(error).splitlines()[0][:110]}")
                continue
            info = jitckpt.plan(rewritten)
            grads = gradients(fresh_copy(rewritten), x)
            identical = all(torch.equal(grads[name], reference[name]) for name in reference)
            step = make_step(rewritten, x, list(rewritten.parameters()))
            step()
            steps.append(step)
            rows.append({
                "strategy": strategy, "limit": "unconstrained" if fraction is None else f"{fraction:.0%}",
                "limit_bytes": info["memory_limit"], "predicted_peak": info["predicted_peak"],
                "measured_peak": step_peak(step, "cpu"), "predicted_ms": info["predicted_time_ms"],
                "stages": info["num_stages"], "gradients_identical": identical,
            })
    plain = fresh_copy(base)
    steps.append(make_step(plain, x, list(plain.parameters())))
    steps[-1]()
    plain_peak = step_peak(steps[-1], "cpu")
    # Every point in the same rounds, so that the curve shows the schedules, not the machine's drift.
    seconds = interleaved_times(steps, "cpu", rounds=args.rounds, min_seconds=0.3)
    for row, s in zip(rows, seconds):
        row["measured_ms"] = s * 1e3
    plain_seconds = seconds[-1]

    fmt = jitckpt._C.format_bytes
    print(f"\nplain TorchScript: step {plain_seconds * 1e3:.1f} ms, measured peak {fmt(plain_peak)}")
    print("(measured peaks are whole steps, whose .grad is freed before each; the predicted peaks count the "
          "chain's activations and parameter gradients, not the loss and the layers after the chain)")
    print(f"{'strategy':9s} {'limit':>13s} {'pred. peak':>11s} {'meas. peak':>11s} {'pred. ms':>9s} "
          f"{'meas. ms':>9s}  grads")
    for r in rows:
        print(f"{r['strategy']:9s} {r['limit']:>13s} {fmt(r['predicted_peak']):>11s} {fmt(r['measured_peak']):>11s} "
              f"{r['predicted_ms']:9.1f} {r['measured_ms']:9.1f}  {'identical' if r['gradients_identical'] else 'DIFFER'}")
    with open(os.path.join(args.out, "demo.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for strategy, marker in [("optimal", "^-"), ("periodic", "x"), ("revolve", "o-"), ("none", "s")]:
            points = sorted((r["measured_peak"], r["measured_ms"]) for r in rows if r["strategy"] == strategy)
            if points:
                ax.plot([p[0] / 2**20 for p in points], [p[1] for p in points], marker, label=strategy)
        ax.set_xlabel("measured peak activation memory (MiB)")
        ax.set_ylabel("time per training step (ms)")
        ax.set_title(f"ResNet-{args.depth}, batch {args.batch}, {args.image}px, CPU")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "demo.png"), dpi=120)
        print(f"\nwrote {args.out}/demo.csv and {args.out}/demo.png")
    except ImportError:
        print(f"\nwrote {args.out}/demo.csv (matplotlib missing: no plot)")
    if not all(r["gradients_identical"] for r in rows):
        raise SystemExit("gradients differ from the unmodified model")


if __name__ == "__main__":
    main()
