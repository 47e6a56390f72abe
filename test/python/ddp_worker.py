"""Two processes (gloo) train DistributedDataParallel around the unmodified module and around its
jitckpt rewrite at the smallest limit that works, for each DDP configuration, and compare the
all-reduced gradients and the parameters after each step bit for bit. Run by test_ddp.py:
ddp_worker.py OUT_JSON. Rank 0 writes {config: "ok" | what differed | the error}."""
import functools
import os
import sys
from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "models"))

import jitckpt  # noqa: E402
import onednn_off  # noqa: E402,F401
import families  # noqa: E402
from smallest_limit import at_smallest_limit  # noqa: E402
from test_autograd_contracts import tied_family  # noqa: E402
from two_processes import run_cases  # noqa: E402

# (family, DDP options): TiedBlocks shares one projection between all its stages and ties its
# embedding to its output layer; with an unused parameter only where DDP is told to expect one.
CASES = {
    "tied_blocks/default": (lambda: tied_family(with_unused=False), {}),
    "tied_blocks/find_unused_parameters": (tied_family, {"find_unused_parameters": True}),
    "tied_blocks/static_graph": (tied_family, {"static_graph": True}),
    "two_input/default": (lambda: families.two_input("test"), {}),
    "two_input/find_unused_parameters": (lambda: families.two_input("test"), {"find_unused_parameters": True}),
    "two_input/static_graph": (lambda: families.two_input("test"), {"static_graph": True}),
    "two_input/no_sync_accumulation": (lambda: families.two_input("test"), {"accumulate": 3}),
}
# The same around eager modules through torch.export (PyTorch 2.6 on), against DDP around the
# eager model.
EAGER_CASES = {
    "tied_blocks/eager/find_unused_parameters": (tied_family, {"find_unused_parameters": True}),
    "two_input/eager/default": (lambda: families.two_input("test"), {}),
    "two_input/eager/no_sync_accumulation": (lambda: families.two_input("test"), {"accumulate": 3}),
} if jitckpt.export.available() else {}
# torch.compile, then DDP, as compiled training scripts order them: the checkpointed module runs as
# it is inside the compiled wrapper, so the reference is DDP around the eager model, uncompiled.
COMPILED_CASES = {
    "two_input/eager/compiled": (lambda: families.two_input("test"), {}),
} if jitckpt.export.available() else {}
STEPS = 2


def rewrite(family: families.Family, eager: bool, compiled: bool) -> torch.nn.Module:
    if compiled:
        return torch.compile(jitckpt.checkpoint(family.eager(0), family.inputs, memory_limit="min", profile_repeats=1))
    if eager:
        return jitckpt.checkpoint(family.eager(0), family.inputs, memory_limit="min", profile_repeats=1)
    profiled = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None, profile_repeats=1)
    return at_smallest_limit(family.make, family.inputs, profiled)


def train(module: torch.nn.Module, family: families.Family, rank: int, options: dict):
    """Gradients and parameters after each step; each rank sees its own batch. With "accumulate":
    n, a step sums n micro-batches, all but the last under no_sync (the all-reduce once a step)."""
    options = dict(options)
    accumulate = options.pop("accumulate", 1)
    ddp = DistributedDataParallel(module, **options)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    records = []
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        for micro in range(accumulate):
            g = torch.Generator().manual_seed(100 * step + 10 * micro + rank)
            inputs = [torch.randn(t.shape, generator=g) if t.is_floating_point()
                      else torch.randint(0, 13, t.shape, generator=g, dtype=t.dtype) for t in family.inputs]
            torch.manual_seed(10 * step + micro)  # dropout
            with torch.jit.optimized_execution(False), ddp.no_sync() if micro + 1 < accumulate else nullcontext():
                (family.loss(ddp(*inputs)) / accumulate).backward()
        named = getattr(module, "_orig_mod", module)  # torch.compile's wrapper
        named = named.module if isinstance(named, jitckpt.CheckpointedModule) else named
        records.append({n: None if p.grad is None else p.grad.clone() for n, p in named.named_parameters()})
        optimizer.step()
        records.append({n: p.detach().clone() for n, p in named.named_parameters()})
    return records


def compare(reference, ours) -> str:
    for i, (a, b) in enumerate(zip(reference, ours)):
        what = f"step {i // 2 + 1} {'gradients' if i % 2 == 0 else 'parameters'}"
        for name, x in a.items():
            y = b[name]
            if (x is None) != (y is None):
                return f"{what}: {name}: {'none' if y is None else 'one'} where the reference has the other"
            if x is not None and not torch.equal(x, y):
                return f"{what}: {name}: max abs difference {(x.double() - y.double()).abs().max().item():.3g}"
    return "ok"


def case(key: str, rank: int) -> str:
    make_family, options = {**CASES, **EAGER_CASES, **COMPILED_CASES}[key]
    family = make_family()
    compiled = key in COMPILED_CASES
    eager = key in EAGER_CASES or compiled
    reference = train(family.eager(0) if eager else family.make(0), family, rank, options)
    return compare(reference, train(rewrite(family, eager, compiled), family, rank, options))


def cases(rank: int):
    return {key: functools.partial(case, key, rank) for key in {**CASES, **EAGER_CASES, **COMPILED_CASES}}


if __name__ == "__main__":
    run_cases(cases, sys.argv[1])
