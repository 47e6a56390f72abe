"""jitckpt's overhead with no memory limit, alone in a fresh process: a training step of the
rewritten model (optimal, unconstrained) against the model as the user would train it without
jitckpt, each pair timed back to back in alternating rounds (median ratio and its spread).

    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=build/python /usr/bin/python3 bench/overhead_bench.py \\
        --model resnet101 --image 96 --batch 4
    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=build/python:bench python3 bench/overhead_bench.py \\
        --model gpt --front-end export --rounds 31 --out bench/results/cpu/overhead/gpt-export.json

--front-end script (the default): the scripted model against plain TorchScript, with the eager
model against plain TorchScript for scale. --front-end export (PyTorch 2.6 and later): the eager
model through torch.export against the eager model itself, and with --compiled-blocks the eager
model with each block of its largest ModuleList (a transformer's layers) through torch.compile,
as stages run through torch.compile would run. Models: a zoo CNN (--image, --batch)
or a transformer of bench/peers.py (gpt, encoder, llama at --size). The paper-protocol runs
(models_bench.py) and bench/peers.py measure the same pair after dozens of other points; this
measures it with nothing else in the process. Target: jitckpt / its base at most x1.02.
OMP_WAIT_POLICY=PASSIVE: see bench/dynamic_shapes.py.
"""
import argparse
import os
import platform
import statistics
import sys
import warnings
from typing import Callable, Dict, List, Tuple

import torch

import jitckpt
import peers
import records
from common import TrainingStep, paired_ratios, steps_per_run, threading_environment, use_threads


def steps(args: argparse.Namespace) -> Tuple[str, TrainingStep, Dict[str, TrainingStep]]:
    """(the base's name, its step, {name: step timed against it}), every model fresh with the same
    weights."""
    spec = args.model if args.model in peers.TRANSFORMERS else f"{args.model}:{args.image}:{args.batch}"
    subject = peers.subject(spec, args.size, args.device)

    def step_of(model: Callable) -> TrainingStep:
        return TrainingStep(lambda: subject.loss(model(*subject.inputs)), list(model.parameters()))

    if args.front_end == "export":
        rewritten = jitckpt.checkpoint(subject.eager(), subject.inputs, memory_limit=None, front_end="export")
        others = {"jitckpt": step_of(rewritten)}
        if args.compiled_blocks:
            others["compiled blocks"] = step_of(with_compiled_blocks(subject.eager()))
        return "eager", step_of(subject.eager()), others
    rewritten = jitckpt.checkpoint(subject.scripted(), subject.inputs, memory_limit=None)
    return "plain", step_of(subject.scripted()), {"eager": step_of(subject.eager()), "jitckpt": step_of(rewritten)}


def with_compiled_blocks(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with each module of its largest ModuleList through torch.compile (default mode)."""
    blocks = max((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)), key=len, default=None)
    if blocks is None:
        raise SystemExit("--compiled-blocks: the model has no ModuleList of blocks")
    for i in range(len(blocks)):
        blocks[i] = torch.compile(blocks[i])
    return model


def spread(ratios: List[float]) -> Dict[str, float]:
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return {"median": statistics.median(ratios), "q1": quartiles[0], "q3": quartiles[2],
            "min": min(ratios), "max": max(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50", help="a zoo CNN, or gpt, encoder, llama")
    parser.add_argument("--image", type=int, default=96, help="a CNN's image size")
    parser.add_argument("--batch", type=int, default=4, help="a CNN's batch")
    parser.add_argument("--size", default="bench", choices=["test", "bench", "large"], help="a transformer's size")
    parser.add_argument("--front-end", default="script", choices=["script", "export"])
    parser.add_argument("--compiled-blocks", action="store_true", help="--front-end export: also time the "
                        "eager model with its blocks through torch.compile")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min-seconds", type=float, default=0.5, help="the least time of one timed run")
    parser.add_argument("--out", help="a JSON record of every round's ratio")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    threads = use_threads()
    base_name, base, others = steps(args)
    for step in [base, *others.values()]:
        for _ in range(3):  # warm-up: gradients, TorchScript's profiling runs
            step()
    per_run = steps_per_run(base, args.device, args.min_seconds)
    line = (f"{args.model} ({args.front_end}) {args.device}, PyTorch {torch.__version__}, {threads} threads, "
            f"{per_run} steps a run, {args.rounds} rounds:")
    results = {}
    for name, step in others.items():
        ratios = paired_ratios(base, step, args.device, per_run, args.rounds)
        results[f"{name} / {base_name}"] = {"ratios": ratios, **spread(ratios)}
        s = results[f"{name} / {base_name}"]
        line += f"  {name} / {base_name} x{s['median']:.3f} [quartiles {s['q1']:.3f}, {s['q3']:.3f}]"
    print(line, flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            records.dump({"command": "bench/overhead_bench.py " + " ".join(sys.argv[1:]), "torch": torch.__version__,
                          "threads": threads, "machine": platform.machine(), "environment": threading_environment(),
                          "steps_a_run": per_run, "results": results}, f)


if __name__ == "__main__":
    main()
