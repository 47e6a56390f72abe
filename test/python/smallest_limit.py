"""Rewrites at the smallest limit that works, shared by the tests that train at it."""
import torch

import jitckpt


def at_smallest_limit(make, inputs, profiled) -> torch.jit.ScriptModule:
    """make(0) rewritten at memory_limit="min", the smallest limit that works (exact to the byte),
    with the costs of `profiled`."""
    return jitckpt.checkpoint(make(0), inputs, memory_limit="min", reuse_profile_of=profiled)
