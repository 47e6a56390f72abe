"""Hugging Face models in training: their key-value cache off, as their own gradient checkpointing
turns it off, and their attention masks decided at capture as their eager run decides them.

without_cache takes a module and one training call's arguments; returns the arguments with
use_cache=False where the module is a transformers PreTrainedModel whose forward would return a
cache (use_cache passed as true, or left to a config that says true, as decoders' configs do).
torch.export cannot return a Cache, and a cache returned from training would hold every layer's keys
and values until the caller drops the output, which is what checkpointing exists to free. Other
modules and calls are returned as they are.

eager_mask_decisions: while tracing, the library builds an attention mask even where the call
passes none (`masking_utils`, which skips the mask in eager runs only, so as not to branch on a
padding mask's values); a relative position bias added to that mask then reaches attention batched
and takes other kernels than the eager model's (BEiT). Without a padding mask that decision reads
no data, so during a capture it is taken as the eager run takes it.
"""
import contextlib
import inspect
import sys
import warnings
from typing import Any, Dict, Iterator, Tuple


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


@contextlib.contextmanager
def eager_mask_decisions() -> Iterator[None]:
    masking = sys.modules.get("transformers.masking_utils")
    traced = getattr(masking, "is_tracing", None)
    if traced is None:
        yield
        return

    def is_tracing(tensor: Any = None) -> bool:
        return False if tensor is None else traced(tensor)

    masking.is_tracing = is_tracing
    try:
        yield
    finally:
        masking.is_tracing = traced


def scan_advice(module: Any) -> str:
    """What to do where a capture met a vmap over what requires grad in a model whose config scans
    with torch's associative_scan (which runs one) only when traced: Mamba's."""
    if getattr(getattr(module, "config", None), "use_associative_scan", False):
        return ("; the model's config says use_associative_scan=True, with which it scans through vmap only when "
                "traced: set it to False to scan as its eager run does")
    return ""
