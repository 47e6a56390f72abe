"""Fully sharded data parallelism around and inside a checkpointed model: which arrangement trains,
and a refusal that says so for the others. Takes a module; returns nothing, or raises TypeError.

FSDP2's `fully_shard` applied to what jitckpt.checkpoint returns, as one unit, gathers the
parameters into tensors it keeps from step to step before the call, and gathers them again before
the backward pass, whose recomputations then read them: that trains as the model does. Sharding
inside the model (`fully_shard` on its layers, FullyShardedDataParallel anywhere in it) gathers a
part's parameters in hooks around the part's own call, which jitckpt's stages and recomputations do
not make; FullyShardedDataParallel around a checkpointed model puts new views of its flat
parameter in place of the model's parameters at every call. Classes are told by name, so that
nothing here imports torch.distributed.
"""
from typing import Optional

import torch

_SHARDING_CLASSES = ("FullyShardedDataParallel", "FSDPModule")
_ADVICE = ("shard the checkpointed model as one unit instead: `model = jitckpt.checkpoint(model, ...)`, then "
           "`fully_shard(model)` (torch.distributed.fsdp.fully_shard, FSDP2)")


def is_sharded(module: torch.nn.Module) -> bool:
    """Whether FSDP (FullyShardedDataParallel, or fully_shard) shards this module's parameters."""
    return any(cls.__name__ in _SHARDING_CLASSES for cls in type(module).__mro__)


def sharded_part_name(module: object) -> Optional[str]:
    """The first part of `module` that FSDP shards ("" for itself), or None (as for what is no
    module, which the caller refuses for what it is)."""
    if not isinstance(module, torch.nn.Module):
        return None
    return next((name for name, sub in module.named_modules() if is_sharded(sub)), None)


def refuse_sharded_parts(module: object) -> None:
    """A model sharded itself or in any of its parts, before or after it was checkpointed."""
    name = sharded_part_name(module)
    if name is None:
        return
    what = type(module).__name__ + ("" if name == "" else f"'s {name}")
    raise TypeError(f"{what} is sharded by FSDP, which gathers a part's parameters in hooks around the part's own "
                    f"call, and jitckpt runs and recomputes the parts without those calls: {_ADVICE}")


def _is_flat_parameter(tensor: Optional[torch.Tensor]) -> bool:
    """FullyShardedDataParallel's flat parameter: a FlatParameter, or (PyTorch 2.1 on) an
    nn.Parameter that it marks as one."""
    return tensor is not None and (type(tensor).__name__ == "FlatParameter" or getattr(tensor, "_is_flat_param", False))


def refuse_flat_parameter_views(module: torch.nn.Module) -> None:
    """A model whose parameters FullyShardedDataParallel (FSDP1) replaced by views of its flat
    parameter for the call (as parameters, or as plain attributes with use_orig_params=False)."""
    for prefix, sub in module.named_modules():
        held = list(sub._parameters.items()) + [(k, v) for k, v in vars(sub).items() if isinstance(v, torch.Tensor)]
        for name, tensor in held:
            if _is_flat_parameter(getattr(tensor, "_base", None)):
                raise TypeError(f"{type(module).__name__}'s {prefix + '.' if prefix else ''}{name} is a view of the "
                                "flat parameter of FullyShardedDataParallel, which puts new views in place of the "
                                f"model's parameters at every call, where jitckpt trains the model's own: {_ADVICE}")
