"""The TorchScript front end: scripted modules, and nn.Modules that TorchScript can script."""
from .scripting import quiet_torchscript, script

__all__ = ["quiet_torchscript", "script"]
