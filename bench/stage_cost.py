"""The runtime's host cost per stage, apart from any kernel: a chain of N tiny blocks (Linear 32 to
32 and ReLU, batch 4: one stage each, kernels of a few microseconds), jitckpt with no limit
against plain TorchScript, the forward alone and the whole training step, each pair timed back to
back in alternating rounds (medians). The difference over N is what each stage costs the host;
where it grows faster than N, something scales with the chain's length squared.

    PYTHONPATH=build/python:bench /usr/bin/python3 bench/stage_cost.py --blocks 100 400

Arguments: --blocks N ... (chains to time), --rounds, --autocast bfloat16 (every forward under
torch.autocast on the CPU), --threads (intra-op threads; default 1, so that the host is timed).
"""
import argparse
import statistics
import warnings

import torch

import jitckpt
from common import TrainingStep, paired_ratios, steps_per_run, timed_run, use_threads


class Blocks(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(32, 32) for _ in range(n)])

    def forward(self, x):
        for block in self.blocks:
            x = torch.relu(block(x))
        return x


def under_autocast(model, dtype):
    def forward(x):
        with torch.autocast("cpu", dtype or torch.bfloat16, enabled=dtype is not None):
            return model(x)
    return forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, nargs="+", default=[100, 400])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--autocast", choices=["bfloat16"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    dtype = getattr(torch, args.autocast) if args.autocast else None
    warnings.filterwarnings("ignore")
    threads = use_threads(args.threads)
    print(f"PyTorch {torch.__version__}, {threads} thread(s){', autocast ' + args.autocast if dtype else ''}")
    for n in args.blocks:
        torch.manual_seed(0)
        plain = torch.jit.script(Blocks(n))
        x = torch.randn(4, 32)
        with torch.autocast("cpu", dtype or torch.bfloat16, enabled=dtype is not None):
            rewritten = jitckpt.checkpoint(plain, (x,), memory_limit=None)
        stages = jitckpt.plan(rewritten)["num_stages"]
        parameters = list(plain.parameters())
        models = {"plain": under_autocast(plain, dtype), "jitckpt": under_autocast(rewritten, dtype)}
        forward = {k: (lambda m=m: m(x)) for k, m in models.items()}
        step = {k: TrainingStep(lambda m=m: m(x).float().sum(), parameters) for k, m in models.items()}
        line = f"{n} blocks, {stages} stages:"
        for name, pair in (("forward", forward), ("step", step)):
            for f in pair.values():
                for _ in range(5):
                    f()
            per_run = steps_per_run(pair["plain"], "cpu", 0.3)
            base = statistics.median(timed_run(pair["plain"], "cpu", per_run) for _ in range(3))
            ratio = statistics.median(paired_ratios(pair["plain"], pair["jitckpt"], "cpu", per_run, args.rounds))
            extra = (ratio - 1) * base / stages * 1e6
            line += f" {name} plain {base * 1e6:.0f} us, jitckpt x{ratio:.3f} ({extra:+.1f} us a stage);"
        print(line.rstrip(";"), flush=True)


if __name__ == "__main__":
    main()
