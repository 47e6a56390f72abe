"""TorchScript's deprecation warnings (PyTorch 2.14 with Python 3.14: "`torch.jit.script` is not
supported in Python 3.14+") for what jitckpt scripts or loads itself are not shown; the user's own
torch.jit calls still warn as they do without jitckpt."""
import sys
import warnings

import torch

import jitckpt

TORCH = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh())
                                            for _ in range(4)])

    def forward(self, x):
        return self.layers(x)


def torchscript_warnings(run) -> list:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if issubclass(w.category, FutureWarning) and "`torch.jit." in str(w.message)]


def test_a_module_jitckpt_scripts_itself_shows_no_torchscript_warning():
    x = torch.randn(512, 32)
    model = None

    def checkpoint():
        nonlocal model
        model = jitckpt.checkpoint(Net().train(), (x,), memory_limit="min")

    assert torchscript_warnings(checkpoint) == []
    model(x).sum().backward()  # and it trains
    assert jitckpt.plan(model)["num_stages"] >= 2


def test_the_users_own_torchscript_calls_still_warn():
    before = torchscript_warnings(lambda: torch.jit.script(Net()))
    torchscript_warnings(lambda: jitckpt.checkpoint(Net().train(), memory_limit="min"))
    after = torchscript_warnings(lambda: torch.jit.script(Net()))
    assert after == before
    if TORCH >= (2, 14) and sys.version_info >= (3, 14):
        assert after, "PyTorch 2.14 on Python 3.14 warns on torch.jit.script: the test would prove nothing"
