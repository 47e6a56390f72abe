"""jitckpt's overhead with no memory limit, alone in a fresh process: a training step of the
rewritten module (optimal, unconstrained) against plain TorchScript, and the eager model against
plain TorchScript for scale, each pair timed back to back in alternating rounds (median ratio).

    PYTHONPATH=build/python /usr/bin/python3 bench/overhead_bench.py --model resnet101 --image 96 --batch 4

The paper-protocol runs (models_bench.py) measure the same pair after dozens of other points;
this measures it with nothing else in the process. Target: jitckpt / plain at most x1.02.
"""
import argparse
import os
import sys
import warnings

import torch

import jitckpt
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import zoo
from common import make_step, paired_ratio, steps_per_run, use_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--image", type=int, default=96)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min-seconds", type=float, default=0.5)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    threads = use_threads()
    scripted, eager = zoo.build(args.model, args.device)
    x = torch.randn(args.batch, 3, args.image, args.image, device=args.device)
    parameters = list(scripted.parameters())
    rewritten = jitckpt.checkpoint(scripted, (x,), memory_limit=None)
    plain = make_step(scripted, x, parameters)
    steps = {"eager": make_step(eager, x, parameters), "jitckpt": make_step(rewritten, x, parameters)}
    for step in [plain, *steps.values()]:
        for _ in range(3):  # warm-up: gradients, TorchScript's profiling runs
            step()
    per_run = steps_per_run(plain, args.device, args.min_seconds)
    line = f"{args.model} {args.image}px batch {args.batch} {args.device} ({threads} threads, {per_run} steps a run):"
    for name, step in steps.items():
        line += f"  {name} / plain x{paired_ratio(plain, step, args.device, per_run, args.rounds):.3f}"
    print(line, flush=True)


if __name__ == "__main__":
    main()
