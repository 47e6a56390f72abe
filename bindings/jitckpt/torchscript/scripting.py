"""The TorchScript front end: a module -> the scripted module the planner takes, and TorchScript's
own warnings kept from the user where jitckpt itself scripts or loads a module."""
import contextlib
import warnings
from typing import Any, Iterator

import torch


@contextlib.contextmanager
def quiet_torchscript() -> Iterator[None]:
    """Where jitckpt itself scripts or loads a module, TorchScript's deprecation warnings (2.11 on;
    on 2.14 with Python 3.14, "`torch.jit.script` is not supported in Python 3.14+") are its own
    business, not the user's: they are not shown. The user's own calls still warn."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=FutureWarning)
        yield


def script(module: Any) -> torch.jit.ScriptModule:
    """The module as TorchScript: a scripted one as it is, an nn.Module scripted, or a TypeError
    that says what to do."""
    if isinstance(module, torch.jit.ScriptModule):
        return module
    if isinstance(module, torch.nn.Module):
        try:
            with quiet_torchscript():
                return torch.jit.script(module)
        except Exception as error:  # the scripting error says which line fails
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise TypeError(
                f"jitckpt.checkpoint needs a TorchScript module and {type(module).__name__} could not be "
                f"scripted ({first}); make it scriptable, or pass torch.jit.script(model) yourself"
            ) from error
    raise TypeError(
        f"jitckpt.checkpoint takes a scripted module (torch.jit.script(model)), not {type(module).__name__}"
    )
