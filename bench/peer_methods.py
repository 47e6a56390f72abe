"""The peers bench/peers.py sets beside jitckpt, each a way a PyTorch 2.x user trains in less
memory without jitckpt: torch.compile with an activation memory budget, and selective activation
checkpointing of a model's blocks (torch.utils.checkpoint, as torchtitan applies it).

peers(make_eager, budgets, policies) yields (method, parameter, make) for every point, make
returning the model to train, or None where this PyTorch lacks the method.
"""
import functools
from typing import Callable, Iterator, List, Optional, Tuple

import torch
import torch.utils.checkpoint

# The repeated units whose forward selective checkpointing wraps (torchtitan wraps a transformer's
# blocks; for a CNN, its residual or dense blocks).
BLOCK_TYPES = {"GPTBlock", "LlamaBlock", "TransformerEncoderLayer", "TransformerDecoderLayer", "BasicBlock",
               "Bottleneck", "_DenseLayer"}


def functorch_config():
    try:
        import torch._functorch.config as config
    except ImportError:
        return None
    return config if hasattr(config, "activation_memory_budget") else None


def compiled(make_eager: Callable[[], torch.nn.Module], budget: float) -> torch.nn.Module:
    """torch.compile of a fresh eager model, compiled at its first call under `budget`. The budget
    is read when a step compiles, so it stays set (until the next compiled point resets Dynamo)."""
    torch._dynamo.reset()
    functorch_config().activation_memory_budget = budget
    model = make_eager()
    model.forward = torch.compile(model.forward)
    return model


def blocks_of(model: torch.nn.Module) -> List[torch.nn.Module]:
    found: List[torch.nn.Module] = []
    for child in model.children():
        found.extend([child] if type(child).__name__ in BLOCK_TYPES else blocks_of(child))
    return found


def compute_ops() -> set:
    """The ops whose outputs the op policies keep: matmuls, convolutions, attention."""
    aten = torch.ops.aten
    names = ["mm", "addmm", "bmm", "baddbmm", "convolution", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
             "_scaled_dot_product_flash_attention_for_cpu"]
    return {getattr(aten, n).default for n in names if hasattr(aten, n)}


def op_policy(every_second_mm: bool) -> Optional[Callable]:
    """A context_fn keeping compute_ops' outputs; with every_second_mm, every second aten.mm of a
    block is recomputed too (torchtitan's op policy). None before PyTorch 2.4."""
    sac = torch.utils.checkpoint
    if not hasattr(sac, "create_selective_checkpoint_contexts"):
        return None
    keep = compute_ops()

    def context_fn():
        counts = {"forward": 0, "recompute": 0}

        def policy(ctx, op, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            if op == torch.ops.aten.mm.default:
                counts[mode] += 1
            save = op in keep and not (every_second_mm and op == torch.ops.aten.mm.default and counts[mode] % 2 == 0)
            return sac.CheckpointPolicy.MUST_SAVE if save else sac.CheckpointPolicy.PREFER_RECOMPUTE
        return sac.create_selective_checkpoint_contexts(policy)
    return context_fn


def checkpoint_blocks(model: torch.nn.Module, every: int, context_fn: Optional[Callable]) -> torch.nn.Module:
    """Every `every`-th block of `model` run under non-reentrant torch.utils.checkpoint. The blocks
    keep their class (nn.TransformerEncoder reads its first layer's attributes): their forward is
    replaced on the instance."""
    blocks = blocks_of(model)
    if not blocks:
        raise SystemExit(f"{type(model).__name__}: no block of {sorted(BLOCK_TYPES)} to checkpoint")
    options = {"use_reentrant": False}
    if context_fn is not None:
        options["context_fn"] = context_fn
    for block in blocks[::every]:
        forward = block.forward

        def run(*args, forward=forward, **kwargs):  # 1.13's checkpoint takes no keyword arguments
            return torch.utils.checkpoint.checkpoint(functools.partial(forward, **kwargs), *args, **options)
        block.forward = run
    return model


def peers(make_eager: Callable[[], torch.nn.Module], budgets: str,
          policies: str) -> Iterator[Tuple[str, str, Optional[Callable[[], torch.nn.Module]]]]:
    for budget in [float(b) for b in budgets.split(",") if b]:
        yield "compile", str(budget), (functools.partial(compiled, make_eager, budget)
                                       if functorch_config() is not None else None)
    for policy in [p for p in policies.split(",") if p]:
        if policy in ("full", "every2"):
            every = 1 if policy == "full" else 2
            yield "sac", policy, lambda every=every: checkpoint_blocks(make_eager(), every, None)
        elif policy in ("ops", "ops-half"):
            context_fn = op_policy(policy == "ops-half")
            yield "sac", policy, (None if context_fn is None else
                                  lambda c=context_fn: checkpoint_blocks(make_eager(), 1, c))
        else:
            raise SystemExit(f"unknown --sac policy {policy!r}: use full, every2, ops or ops-half")
