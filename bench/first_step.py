"""What planning at the first training call costs: a model rewritten without example inputs
(jitckpt.checkpoint(model, memory_limit=...)) profiles and solves inside its first training step.
Times that first step against the median of the steps after it, and against plain TorchScript's
step, for ResNet-50 and the GPT-style decoder of test/models/families.py.

    PYTHONPATH=build/python:bench /usr/bin/python3 bench/first_step.py [--out FILE.md]
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import families
import jitckpt
from common import use_threads

STEPS = 5


def resnet50():
    def make():
        torch.manual_seed(0)
        return torch.jit.script(torchvision.models.resnet50().train())
    return "ResNet-50, batch 8, 128x128", make, (torch.randn(8, 3, 128, 128),), lambda out: out.float().pow(2).mean()


def gpt():
    family = families.FAMILIES["gpt_mask_input"]("bench")
    return f"GPT decoder ({family.description})", lambda: family.make(0), family.inputs, family.loss


def step_seconds(model, inputs, loss) -> float:
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    loss(model(*inputs)).backward()
    return time.perf_counter() - start


def measure(name, make, inputs, loss, limit):
    plain = make()
    step_seconds(plain, inputs, loss)  # the executor's first runs
    plain_step = statistics.median(step_seconds(plain, inputs, loss) for _ in range(STEPS))
    model = jitckpt.checkpoint(make(), memory_limit=limit)
    first = step_seconds(model, inputs, loss)
    later = statistics.median(step_seconds(model, inputs, loss) for _ in range(STEPS))
    info = jitckpt.plan(model)
    return (f"| {name} | {limit} | {info['num_stages']} | {first:.2f} s | {later:.3f} s | {plain_step:.3f} s "
            f"| {first / later:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    threads = use_threads()
    lines = [f"torch {torch.__version__}, {threads} threads, CPU; median of {STEPS} steps after the first",
             "",
             "| model | limit | stages | first step (profiles, solves) | later step | plain step | first / later |",
             "|---|---|---|---|---|---|---|"]
    for name, make, inputs, loss in (resnet50(), gpt()):
        # (A limit covers the parameter gradients too: half of ResNet-50's step peak here is below
        # what its gradients and smallest schedule need, so 0.75 and "min" for a constrained plan.)
        for limit in ("auto", 0.75, "min"):
            lines.append(measure(name, make, inputs, loss, limit))
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("Made by: PYTHONPATH=build/python:bench /usr/bin/python3 bench/first_step.py --out "
                    f"{args.out}\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
