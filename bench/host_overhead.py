"""Where jitckpt's overhead with no memory limit comes from on a GPU: per model, a training step of
plain TorchScript, of plain TorchScript without its optimizing executor (the interpreter that
jitckpt's stages run in), of jitckpt unconstrained (its stages run as one group), of jitckpt with
every stage run apart (JITCKPT_GROUP_STAGES=0) and of the eager model, each paired with plain
in alternating rounds (median and range of the time ratio), and each step's host time (from the
call until it returns, the GPU not waited for) beside its synchronized time: where the two are
equal, the step is bound by the host, and every microsecond of per-stage bookkeeping shows.

    PYTHONPATH=build-cuda/python:bench python3 bench/host_overhead.py inception_v3:500:8 resnet101:1000:2

Arguments: model:image:batch (test/models/zoo.py names). --profile DIR also writes torch.profiler tables
(self CPU and self CUDA time per op) of one step of plain and of jitckpt per model. --autocast
bfloat16 (or float16) plans and runs every forward under torch.autocast to that dtype.
"""
import argparse
import os
import statistics
import sys
import time
import warnings

import torch

import jitckpt
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import zoo
from common import make_step, paired_ratios, steps_per_run, synchronize


def without_optimizing_executor(step):
    def run():
        with torch.jit.optimized_execution(False):
            step()
    return run


def host_and_step_ms(step, device: str, repeats: int = 5):
    host, full = [], []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        step()
        returned = time.perf_counter()
        synchronize(device)
        host.append(returned - start)
        full.append(time.perf_counter() - start)
    return 1e3 * statistics.median(host), 1e3 * statistics.median(full)


def profile_tables(steps, device: str, path: str) -> None:
    from torch.profiler import ProfilerActivity, profile
    for name in ("plain", "jitckpt"):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            steps[name]()
            synchronize(device)
        with open(f"{path}-{name}.txt", "w") as f:
            f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30) + "\n\n")
            f.write(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30))


def under_autocast(model, device: str, dtype):
    """The model's forward under torch.autocast (the backward outside it, as training loops run)."""
    if dtype is None:
        return model

    def forward(x):
        with torch.autocast(device.split(":")[0], dtype):
            return model(x)
    return forward


def stages_apart(step):
    """The same rewritten module with every stage run apart (JITCKPT_GROUP_STAGES=0, read at each
    call): what grouping the stages saves."""
    def run():
        os.environ["JITCKPT_GROUP_STAGES"] = "0"
        try:
            step()
        finally:
            del os.environ["JITCKPT_GROUP_STAGES"]
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiments", nargs="+", help="model:image:batch")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--eager", action="store_true", help="also time the eager model")
    parser.add_argument("--profile", default="", help="folder for torch.profiler tables")
    parser.add_argument("--autocast", choices=["bfloat16", "float16"], help="forward under torch.autocast")
    args = parser.parse_args()
    dtype = getattr(torch, args.autocast) if args.autocast else None
    warnings.filterwarnings("ignore")
    for experiment in args.experiments:
        name, image, batch = experiment.split(":")
        torch.manual_seed(0)
        scripted, eager = zoo.build(name, args.device)
        x = torch.randn(int(batch), 3, int(image), int(image), device=args.device)
        parameters = list(scripted.parameters())
        start = time.perf_counter()
        with torch.autocast(args.device.split(":")[0], dtype or torch.bfloat16, enabled=dtype is not None):
            rewritten = jitckpt.checkpoint(scripted, (x,), memory_limit=None)
        planned = time.perf_counter() - start
        steps = {"plain": make_step(under_autocast(scripted, args.device, dtype), x, parameters),
                 "jitckpt": make_step(under_autocast(rewritten, args.device, dtype), x, parameters)}
        steps["jitckpt-apart"] = stages_apart(steps["jitckpt"])
        steps["plain-noopt"] = without_optimizing_executor(steps["plain"])
        if args.eager:
            steps["eager"] = make_step(under_autocast(eager, args.device, dtype), x, parameters)
        for step in steps.values():
            for _ in range(4):  # gradients, TorchScript's profiling runs
                step()
        per_run = steps_per_run(steps["plain"], args.device, 0.5)
        precision = f", under autocast to {args.autocast}" if dtype else ""
        print(f"{experiment}{precision}: planned in {planned:.1f} s, {per_run} steps a run", flush=True)
        for key, step in steps.items():
            line = f"  {key:12s} host {{:.1f}} ms, step {{:.1f}} ms".format(*host_and_step_ms(step, args.device))
            if key != "plain":
                ratios = paired_ratios(steps["plain"], step, args.device, per_run, args.rounds)
                line += f", / plain x{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]"
            print(line, flush=True)
        if args.profile:
            os.makedirs(args.profile, exist_ok=True)
            profile_tables(steps, args.device, os.path.join(args.profile, f"profile-{name}"))
        del steps, rewritten, scripted, eager
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
