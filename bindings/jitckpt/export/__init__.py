"""The export front end (PyTorch 2.6 and later): an nn.Module captured with torch.export at its first
training call (capture.py), trained through the rewritten capture with its own call signature and
output types (checkpointed_module.py)."""
from .capture import CaptureError, available
from .checkpointed_module import CheckpointedModule

__all__ = ["CaptureError", "CheckpointedModule", "available"]
