"""Finer stages (cuts="every") against the default partition (cuts="cheapest") on torchvision
models: the smallest limit each reaches, what of it the parameter gradients take (no schedule goes
below them), and the step at the default's smallest limit, where both fit: predicted time, and the
measured time ratio (paired rounds, medians) and peaks.

    PYTHONPATH=build/python:bench /usr/bin/python3 bench/finer_stages.py \\
        resnet18:224:16 resnet50:224:8 densenet121:160:4

Arguments: models as name:size:batch (torchvision names), --rounds (paired timing rounds; 0
skips the training steps), --threads (intra-op threads; default all).
"""
import argparse
import copy
import statistics
import time
import warnings

import torch
import torchvision

import jitckpt
from common import make_step, paired_ratios, step_peak, use_threads

MiB = 2**20


def gradient_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def at_limit(eager, x, limit, cuts, profiled):
    model = jitckpt.checkpoint(torch.jit.script(copy.deepcopy(eager)), (x,), limit, cuts=cuts,
                               reuse_profile_of=profiled)
    return model, jitckpt.plan(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["resnet18:224:16", "resnet50:224:8", "densenet121:160:4"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"PyTorch {torch.__version__}, {use_threads(args.threads)} thread(s)")
    for spec in args.models:
        name, size, batch = spec.split(":")
        torch.manual_seed(0)
        eager = getattr(torchvision.models, name)().train()
        x = torch.randn(int(batch), 3, int(size), int(size))
        profiled, smallest = {}, {}
        for cuts in ("cheapest", "every"):  # as a user asks for it: one call, its own profile
            start = time.perf_counter()
            profiled[cuts] = jitckpt.checkpoint(torch.jit.script(copy.deepcopy(eager)), (x,), "min", cuts=cuts)
            seconds = time.perf_counter() - start
            smallest[cuts] = plan = jitckpt.plan(profiled[cuts])
            print(f"{spec} {cuts:8s}: {plan['num_stages']:3d} stages (planned in {seconds:5.1f} s), "
                  f"smallest limit {plan['memory_limit'] / MiB:7.2f} MiB of {plan['unconstrained_peak'] / MiB:7.2f} "
                  f"MiB unconstrained ({plan['memory_limit'] / plan['unconstrained_peak']:.3f}), "
                  f"{plan['predicted_time_ms']:7.1f} ms there", flush=True)
        lower = smallest["every"]["memory_limit"] / smallest["cheapest"]["memory_limit"]
        print(f"{spec}: every / cheapest smallest limit x{lower:.3f}; parameter gradients "
              f"{gradient_bytes(eager) / MiB:.2f} MiB", flush=True)
        if args.rounds <= 0:
            continue
        limit = smallest["cheapest"]["memory_limit"]
        models, plans = {}, {}
        for cuts in ("cheapest", "every"):
            models[cuts], plans[cuts] = at_limit(eager, x, limit, cuts, profiled[cuts])
        steps = {cuts: make_step(m, x, list(m.parameters())) for cuts, m in models.items()}
        peaks = {cuts: step_peak(s, "cpu") for cuts, s in steps.items()}
        ratios = paired_ratios(steps["cheapest"], steps["every"], "cpu", 1, args.rounds)
        same = all(torch.equal(a.grad, b.grad) for a, b in
                   zip(models["cheapest"].parameters(), models["every"].parameters()))
        print(f"{spec} at {limit / MiB:.2f} MiB: predicted {plans['cheapest']['predicted_time_ms']:.1f} / "
              f"{plans['every']['predicted_time_ms']:.1f} ms (cheapest / every); measured every / cheapest "
              f"x{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]; peaks "
              f"{peaks['cheapest'] / MiB:.2f} / {peaks['every'] / MiB:.2f} MiB; gradients "
              f"{'identical' if same else 'DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
