"""Measured peak of a training step against the plan's limit and prediction, with the caller
keeping the model's output through the backward (`out = model(x); loss(out).backward()`) and
without it. The loss is (output * weights).sum(), which makes nothing beside the output's
gradient, so the step's peak is the plan's to predict:

    PYTHONPATH=build/python:bench /usr/bin/python3 bench/held_output.py --size bench lstm_stack gru encoder_decoder gpt_mask_input
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import families
import jitckpt
from common import use_threads


def step_peak(model, family, weights, keep_output: bool, seed: int) -> int:
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)  # outside the count: the step allocates its gradients
    with jitckpt.cpu_memory() as memory, torch.jit.optimized_execution(False):
        output = model(*family.inputs)
        outputs = [t for t in families.tensors_of(output) if t.is_floating_point()]
        loss = sum((t * w).sum() for t, w in zip(outputs, weights))
        del outputs
        if not keep_output:
            del output
        loss.backward()
    return memory.peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("families", nargs="+", choices=list(families.FAMILIES))
    parser.add_argument("--size", default="bench", choices=families.SIZES)
    args = parser.parse_args()
    use_threads()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, size {args.size}")
    print("family limit stages limit_bytes predicted_peak kept/limit kept/predicted dropped/predicted")
    for name in args.families:
        family = families.FAMILIES[name](args.size)
        profiled = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None)
        with torch.no_grad():
            weights = [torch.randn_like(t) for t in families.tensors_of(family.make(0)(*family.inputs))
                       if t.is_floating_point()]
        for limit in ["min", 0.6, None]:
            try:
                model = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=limit,
                                           reuse_profile_of=profiled)
            except RuntimeError as error:
                print(f"{name} {limit} infeasible: {str(error).splitlines()[0][:100]}", flush=True)
                continue
            info = jitckpt.plan(model)
            peaks = {}
            for keep in (True, False):
                step_peak(model, family, weights, keep, 0)
                peaks[keep] = step_peak(model, family, weights, keep, 1)
            print(f"{name} {limit} {info['num_stages']} {info['memory_limit']} {info['predicted_peak']} "
                  f"{peaks[True] / info['memory_limit']:.3f} {peaks[True] / info['predicted_peak']:.3f} "
                  f"{peaks[False] / info['predicted_peak']:.3f}", flush=True)


if __name__ == "__main__":
    main()
