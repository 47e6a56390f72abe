"""Hugging Face models in training: their key-value cache off, as their own gradient checkpointing
turns it off.

Takes a module and one training call's arguments; returns the arguments with use_cache=False where
the module is a transformers PreTrainedModel whose forward would return a cache (use_cache passed
as true, or left to a config that says true, as decoders' configs do). torch.export cannot return
a Cache, and a cache returned from training would hold every layer's keys and values until the
caller drops the output, which is what checkpointing exists to free. Other modules and calls are
returned as they are.
"""
import inspect
import warnings
from typing import Any, Dict, Tuple


def _is_pretrained_model(module: Any) -> bool:
    return any(c.__name__ == "PreTrainedModel" and c.__module__.startswith("transformers")
               for c in type(module).__mro__)


def without_cache(module: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    if not _is_pretrained_model(module):
        return args, kwargs
    try:
        signature = inspect.signature(module.forward)
        bound = signature.bind_partial(*args, **kwargs)
    except (TypeError, ValueError):  # no signature to read, or a call the model itself will refuse
        return args, kwargs
    if "use_cache" not in signature.parameters:
        return args, kwargs
    use_cache = bound.arguments.get("use_cache")
    if use_cache is None:
        use_cache = getattr(getattr(module, "config", None), "use_cache", False)
    if not use_cache:
        return args, kwargs
    warnings.warn(
        f"jitckpt: {type(module).__name__} would return a cache of every layer's keys and values "
        "(use_cache=True), which training does not read and checkpointing would have to keep; it trains "
        "with use_cache=False, as Hugging Face's gradient checkpointing does. Pass use_cache=False, or set "
        "model.config.use_cache = False, to say so yourself", stacklevel=2)
    bound.arguments["use_cache"] = False
    return bound.args, bound.kwargs
