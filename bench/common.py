"""Shared helpers for the demo and the benchmarks: training steps, measurements, gradients."""
import gc
import io
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

import jitckpt
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import zoo

Step = Callable[[], None]


def pyplot():
    """matplotlib.pyplot drawing to files (Agg), or None with a note when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return None
    return plt


# Read by OpenMP and OpenBLAS when torch loads (bench/dynamic_shapes.py says why they matter).
THREADING_VARIABLES = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def threading_environment() -> Dict[str, str]:
    """The threading variables a run was started with, for its record."""
    return {k: os.environ[k] for k in THREADING_VARIABLES if k in os.environ}


def use_threads(threads: int = 0) -> int:
    """Sets the intra-op thread count (0: one per core) and returns it. Set explicitly: some
    machines' OpenMP starts with one thread whatever the core count (seen on the 2-core CI kind,
    where two threads make a ResNet-50 step six times faster)."""
    torch.set_num_threads(threads or os.cpu_count() or 1)
    return torch.get_num_threads()


def loss_of(output) -> torch.Tensor:
    return zoo.logits(output).float().pow(2).mean()


class TrainingStep:
    """One training step: forward, loss, backward, with every .grad set to None first (as
    zero_grad(set_to_none=True), PyTorch 2.x's default, does). step_peak releases the gradients
    before it starts counting, so each strategy's peak includes the parameter gradients that its
    backward makes, as they are made."""

    def __init__(self, run: Callable[[], torch.Tensor], parameters: Sequence[torch.Tensor]):
        self.run = run
        self.parameters = list(parameters)

    def release_gradients(self) -> None:
        for p in self.parameters:
            p.grad = None

    def __call__(self) -> None:
        self.release_gradients()
        self.run().backward()


def make_step(model: Callable, x: torch.Tensor, parameters: Sequence[torch.Tensor]) -> TrainingStep:
    return TrainingStep(lambda: loss_of(model(x)), parameters)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def step_peak(step: Step, device: str) -> int:
    """Peak bytes of tensor memory one step holds above what was held before it: the counting
    allocator on the CPU (exact), the caching allocator's allocated-bytes peak on CUDA."""
    release = getattr(step, "release_gradients", None)
    if release is not None:
        release()
    if device.startswith("cuda"):
        synchronize(device)
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        step()
        synchronize(device)
        return torch.cuda.max_memory_allocated() - start
    with jitckpt.cpu_memory() as memory:
        step()
    return memory.peak


def steps_per_run(step: Step, device: str, min_seconds: float) -> int:
    """How many steps make one timed run last at least min_seconds (the paper: 500 ms)."""
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    return max(1, int(min_seconds / max(time.perf_counter() - start, 1e-6)) + 1)


def timed_run(step: Step, device: str, steps: int) -> float:
    """Seconds per step over one run of `steps` steps."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / steps


def paired_ratios(base: Step, other: Step, device: str, steps: int, rounds: int) -> List[float]:
    """time(other) / time(base) per round, each round timing one run of `steps` steps of each back
    to back, the order alternating: slow drifts of the machine cancel out."""
    ratios = []
    for i in range(rounds):
        if i % 2 == 0:
            a, b = timed_run(base, device, steps), timed_run(other, device, steps)
        else:
            b, a = timed_run(other, device, steps), timed_run(base, device, steps)
        ratios.append(b / a)
    return ratios


def paired_ratio(base: Step, other: Step, device: str, steps: int, rounds: int) -> float:
    """The median of paired_ratios."""
    return statistics.median(paired_ratios(base, other, device, steps, rounds))


def measure(step: Step, device: str, runs: int = 5, min_seconds: float = 0.5,
            steps: Optional[int] = None) -> Tuple[float, int]:
    """(median seconds per step over `runs` timed runs of `steps` steps each, step peak bytes),
    after a warm-up step that also allocates the gradients. `steps` defaults to enough for a run
    to last min_seconds."""
    step()
    peak = step_peak(step, device)
    steps = steps or steps_per_run(step, device, min_seconds)
    return statistics.median(timed_run(step, device, steps) for _ in range(runs)), peak


def interleaved_times(steps: Sequence[Step], device: str, rounds: int = 5,
                      min_seconds: float = 0.5) -> List[float]:
    """Median seconds per step of each of `steps`, timed in alternating rounds: each round runs
    every step once (a run of enough steps to last min_seconds), in reverse order every other
    round, so that a slow drift of the machine reaches every point alike instead of the points
    timed last. The steps must have run once already (a warm-up, as the caller's peak measurement
    is), so that the step steps_per_run times is a warm one."""
    counts = [steps_per_run(step, device, min_seconds) for step in steps]
    times: List[List[float]] = [[] for _ in steps]
    order = list(range(len(steps)))
    for i in range(rounds):
        for k in (order if i % 2 == 0 else reversed(order)):
            times[k].append(timed_run(steps[k], device, counts[k]))
    return [statistics.median(t) for t in times]


def is_out_of_memory(error: BaseException) -> bool:
    return "out of memory" in str(error).lower()


def release_memory(device: str) -> None:
    """After a failed step (out of memory): drop what it left and give cached blocks back."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


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
