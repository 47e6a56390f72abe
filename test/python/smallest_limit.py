"""Rewrites at the smallest limit that works, shared by the tests that train at it."""
import re

import torch

import jitckpt

SMALLEST = re.compile(r"smallest limit that works is [^(]*\((\d+) bytes\)")


def at_smallest_limit(make, inputs, profiled) -> torch.jit.ScriptModule:
    """make(0) rewritten at the first point of the optimal solver's time-memory curve of
    `profiled`, or, where checkpoint finds that limit a little too small (seen on the U-Net: the
    curve and the solve at a limit discretize memory differently), at the smallest limit its error
    names. The costs are those of `profiled`."""
    try:
        return jitckpt.checkpoint(make(0), inputs, memory_limit=jitckpt.plan(profiled)["curve"][0][0],
                                  reuse_profile_of=profiled)
    except RuntimeError as error:
        named = SMALLEST.search(str(error))
        if named is None:
            raise
    return jitckpt.checkpoint(make(0), inputs, memory_limit=int(named.group(1)), reuse_profile_of=profiled)
