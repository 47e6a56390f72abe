"""How far one profile's time calibration is from the steps it predicts, and how many page faults a
step takes: profiles a model once (no checkpointing, calibrated on the whole schedule), makes a
second no-checkpointing model from that profile and one at half its peak, then times plain and the
three in rotated rounds of one step each, counting the process's minor page faults per step.

    PYTHONPATH=build/python:bench /usr/bin/python3 bench/calibration_spread.py --model inception_v3
    ... --steady-allocator    (glibc: fixed mmap threshold, no trimming: freed memory is reused)

Run it in several processes: the spread of "predicted" across them is the calibration's own noise.
"""
import argparse
import ctypes
import os
import resource
import statistics
import sys

import torch

import jitckpt
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import zoo
from common import make_step, timed_run, use_threads


def steady_allocator() -> None:
    """glibc's malloc returns freed memory to the system (trim) and moves its mmap threshold as
    it goes; fixed, a training step's buffers come back from the heap without page faults."""
    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_threshold = -1, -3
    if not (libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 2**31 - 1)):
        raise SystemExit("mallopt refused the thresholds")


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="inception_v3")
    parser.add_argument("--image", type=int, default=299)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steady-allocator", action="store_true")
    args = parser.parse_args()
    if args.steady_allocator:
        steady_allocator()
    use_threads()
    scripted, _ = zoo.build(args.model, "cpu")
    x = torch.randn(args.batch, 3, args.image, args.image)
    unconstrained = jitckpt.checkpoint(scripted, (x,), strategy="none", memory_limit=10**12)
    plan = jitckpt.plan(unconstrained)
    again = jitckpt.checkpoint(scripted, (x,), strategy="none", memory_limit=10**12,
                               reuse_profile_of=unconstrained)
    half = jitckpt.checkpoint(scripted, (x,), memory_limit=plan["predicted_peak"] // 2,
                              reuse_profile_of=unconstrained)
    predicted = {"none": plan["predicted_time_ms"], "none again": plan["predicted_time_ms"],
                 "half": jitckpt.plan(half)["predicted_time_ms"]}
    models = {"plain": scripted, "none": unconstrained, "none again": again, "half": half}
    steps = {name: make_step(m, x, list(m.parameters())) for name, m in models.items()}
    for step in steps.values():
        step()
    times = {name: [] for name in steps}
    faults = {name: [] for name in steps}
    names = list(steps)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            before = minor_faults()
            times[name].append(timed_run(steps[name], "cpu", 1) * 1e3)
            faults[name].append(minor_faults() - before)
    print(f"allocator: {'steady' if args.steady_allocator else 'default'}; threads {torch.get_num_threads()}")
    for name in names:
        median = statistics.median(times[name])
        text = f"{name:10s} median {median:7.1f} ms"
        if name in predicted:
            text += f"  predicted {predicted[name]:7.1f} ms  measured/predicted {median / predicted[name]:.3f}"
        print(f"{text}  runs {[round(t) for t in times[name]]}  minor faults {faults[name]}")


if __name__ == "__main__":
    main()
