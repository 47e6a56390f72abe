"""jitckpt: train TorchScript models in less memory with optimal checkpointing.

    import jitckpt
    model = jitckpt.checkpoint(torch.jit.script(model), memory_limit="auto")  # plans at step 1
    model = jitckpt.checkpoint(torch.jit.script(model), (example_batch,), memory_limit="2GiB")
    print(jitckpt.dump(model))

`import jitckpt` also loads the library that defines the `jitckpt::chain` op and the
`jitckpt.Plan` class, so rewritten modules saved with torch.jit.save load with torch.jit.load.
"""
import torch  # noqa: F401  (loads libtorch and torch's Python bindings before _C)

from . import _C  # noqa: E402
from .api import checkpoint, cpu_memory, dump, is_rewritten, partition, plan, strip  # noqa: E402
from .export import CheckpointedModule  # noqa: E402
from .plotting import plot  # noqa: E402

__version__ = "0.1.0"
__all__ = ["checkpoint", "CheckpointedModule", "dump", "plan", "plot", "partition", "strip", "is_rewritten", "cpu_memory", "_C"]
