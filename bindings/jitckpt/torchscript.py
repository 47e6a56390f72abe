"""TorchScript's own warnings, kept from the user where jitckpt itself scripts or loads a module."""
import contextlib
import warnings
from typing import Iterator


@contextlib.contextmanager
def quiet_torchscript() -> Iterator[None]:
    """Where jitckpt itself scripts or loads a module, TorchScript's deprecation warnings (2.11 on;
    on 2.14 with Python 3.14, "`torch.jit.script` is not supported in Python 3.14+") are its own
    business, not the user's: they are not shown. The user's own calls still warn."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=FutureWarning)
        yield
