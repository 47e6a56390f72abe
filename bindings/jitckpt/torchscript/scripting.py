"""The TorchScript front end: a module -> the scripted module the planner takes, and TorchScript's
own warnings kept from the user where jitckpt itself scripts or loads a module."""
import contextlib
import warnings
from typing import Any, Iterator, List, Tuple

import torch


@contextlib.contextmanager
def quiet_torchscript() -> Iterator[None]:
    """Where jitckpt itself scripts or loads a module, TorchScript's deprecation warnings (2.11 on;
    on 2.14 with Python 3.14, "`torch.jit.script` is not supported in Python 3.14+") are its own
    business, not the user's: they are not shown. The user's own calls still warn."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=FutureWarning)
        yield


@contextlib.contextmanager
def parametrizations_kept(module: torch.nn.Module) -> Iterator[None]:
    """Scripting reads every attribute, properties included, and a parametrized weight computes
    itself at each read: spectral_norm's, in training mode, steps its power iteration and updates
    its buffers in place. What scripting changed of the parametrizations' buffers is put back, so
    that an attempt, failed or not, leaves the model as it was."""
    saved: List[Tuple[torch.Tensor, int, torch.Tensor]] = []
    for sub in module.modules():
        if isinstance(sub, torch.nn.utils.parametrize.ParametrizationList):
            saved.extend((b, b._version, b.detach().clone()) for b in sub.buffers())
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, version, value in saved:
                if buffer._version != version:
                    buffer.copy_(value)


def script(module: Any) -> torch.jit.ScriptModule:
    """The module as TorchScript: a scripted one as it is, an nn.Module scripted, or a TypeError
    that says what to do."""
    if isinstance(module, torch.jit.ScriptModule):
        return module
    if isinstance(module, torch.nn.Module):
        try:
            with quiet_torchscript(), parametrizations_kept(module):
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
