"""Shared helpers for the demo and the benchmarks: models, training steps, measurements."""
import io
import statistics
import time
from typing import Callable, Dict, List, Sequence, Tuple

import torch
import torchvision

import jitckpt


def scripted_resnet(depth: int, seed: int = 0) -> torch.jit.ScriptModule:
    torch.manual_seed(seed)
    model = getattr(torchvision.models, f"resnet{depth}")()
    return torch.jit.script(model.train())


def eager_sequential_resnet(model: torch.nn.Module) -> torch.nn.Sequential:
    """The equivalent nn.Sequential of a torchvision ResNet, for checkpoint_sequential."""
    blocks: List[torch.nn.Module] = [model.conv1, model.bn1, model.relu, model.maxpool]
    for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
        blocks.extend(layer.children())
    blocks += [model.avgpool, torch.nn.Flatten(1), model.fc]
    return torch.nn.Sequential(*blocks)


def loss_of(output: torch.Tensor) -> torch.Tensor:
    return output.float().pow(2).mean()


def train_step(model: Callable, x: torch.Tensor, parameters: Sequence[torch.Tensor]) -> None:
    for p in parameters:
        if p.grad is not None:
            p.grad.zero_()  # gradients stay allocated: model memory, outside the activation budget
    loss_of(model(x)).backward()


def measure(model: Callable, x: torch.Tensor, parameters: Sequence[torch.Tensor], runs: int = 5,
            min_seconds: float = 0.3) -> Tuple[float, int]:
    """(median seconds per step, peak bytes above what was held before a step), CPU only."""
    train_step(model, x, parameters)  # warm-up; allocates the gradients
    with jitckpt.cpu_memory() as memory:
        train_step(model, x, parameters)
    steps = 1
    start = time.perf_counter()
    train_step(model, x, parameters)
    once = time.perf_counter() - start
    steps = max(1, int(min_seconds / max(once, 1e-6)))
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(steps):
            train_step(model, x, parameters)
        timings.append((time.perf_counter() - start) / steps)
    return statistics.median(timings), memory.peak


def gradients(model: torch.jit.ScriptModule, x: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Parameter gradients of one step, run by TorchScript's interpreter without the optimizing
    executor: its autodiff subgraphs round differently from eager autograd (by about 1e-8), which
    is what both the unmodified model and jitckpt's stages then use."""
    model.zero_grad(set_to_none=True)
    with torch.jit.optimized_execution(False):
        loss_of(model(x)).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def fresh_copy(model: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    """An independent copy with leaf parameters (copy.deepcopy of a ScriptModule gives non-leaf
    ones): a round trip through torch.jit.save/load."""
    buffer = io.BytesIO()
    torch.jit.save(model, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)
