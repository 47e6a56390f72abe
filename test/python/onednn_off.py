"""Every test process imports this (conftest.py, and the scripts the tests start): on PyTorch 2.x it
turns oneDNN off. Debian trixie's 2.6 computes NaN convolution gradients through oneDNN on this
project's machines, with or without jitckpt (docs/troubleshooting.md), and a comparison against
the unmodified model must compare numbers. 1.13 keeps oneDNN."""
import torch

if int(torch.__version__.split(".")[0]) >= 2:
    torch.backends.mkldnn.enabled = False
