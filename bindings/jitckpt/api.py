"""Python entry points over jitckpt._C."""
import sys
import warnings
from typing import Any, Dict, Optional, Sequence, Union

import torch

from . import _C
from .export import CheckpointedModule
from .export import capture as capturing
from .export.hugging_face import without_cache
from .sharding import refuse_sharded_parts
from .torchscript import quiet_torchscript, script

MemoryLimit = Union[None, int, float, str]




def _uncompiled(module: Any) -> Any:
    """The module that torch.compile wrapped (its OptimizedModule's `_orig_mod`), else `module`."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # never imported: nothing was compiled
    optimized = getattr(eval_frame, "OptimizedModule", None)
    return module._orig_mod if optimized is not None and isinstance(module, optimized) else module


def _rewritten(module: Any, what: str) -> torch._C.ScriptModule:
    """The C++ module of what jitckpt.checkpoint returned, or a TypeError that says so."""
    module = _uncompiled(module)
    if isinstance(module, CheckpointedModule):
        if module.rewritten is None:
            raise ValueError(f"jitckpt.{what}: this module has not been captured yet; that happens at its first "
                             "training call, or in checkpoint() when it is given example_inputs")
        module = module.rewritten
    if not isinstance(module, torch.jit.ScriptModule):
        raise TypeError(f"jitckpt.{what} takes a module that jitckpt.checkpoint returned, not {type(module).__name__}")
    return module._c


def _exports(module: Any, front_end: str) -> bool:
    """Whether checkpoint captures `module` with torch.export (else it scripts it)."""
    if front_end not in ("auto", "export", "script"):
        raise ValueError(f'front_end must be "auto", "export" or "script", not {front_end!r}')
    if isinstance(module, torch.jit.ScriptModule) or not isinstance(module, torch.nn.Module):
        if front_end == "export":
            raise TypeError("front_end='export' takes the eager nn.Module, not a scripted one")
        return False
    if front_end == "export" and not capturing.available():
        raise RuntimeError(f"front_end='export' needs PyTorch 2.6 or later (this is {torch.__version__}); "
                           "use front_end='script' with a scriptable model")
    return front_end == "export" or (front_end == "auto" and capturing.available())


def _every_cut(cuts: str) -> bool:
    if cuts not in ("cheapest", "every"):
        raise ValueError(f'cuts must be "cheapest" (one cut between two compute-heavy ops) or "every" '
                         f'(finer stages), not {cuts!r}')
    return cuts == "every"


def _limit_text(memory_limit: MemoryLimit) -> str:
    if memory_limit is None:
        return "none"
    if isinstance(memory_limit, bool):
        raise TypeError("memory_limit must be bytes, a fraction, or a string such as '2GiB'")
    if isinstance(memory_limit, int):
        if memory_limit <= 0:
            raise ValueError(f"memory_limit {memory_limit} must be positive")
        return f"{memory_limit}B"
    if isinstance(memory_limit, float):
        if not 0 < memory_limit <= 1:
            raise ValueError(
                f"memory_limit {memory_limit}: a float is a fraction of the unconstrained peak, "
                "in (0, 1]; give bytes as an int or a string such as '2GiB'"
            )
        return repr(memory_limit)
    if isinstance(memory_limit, str):
        return memory_limit
    raise TypeError(f"memory_limit must be an int, a float or a string, not {type(memory_limit).__name__}")


class _ProfileProgress:
    """Profiling progress on stderr: a tqdm bar where tqdm is installed, else one updating line.
    Shown on a terminal or with verbose=True; silent otherwise."""

    def __init__(self, verbose: bool) -> None:
        self.shown = verbose or sys.stderr.isatty()
        self.bar: Any = None

    def __call__(self, stage: int, stages: int) -> None:
        if self.bar is None:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=stages, desc="jitckpt: profiling stages", unit="stage", file=sys.stderr)
            except ImportError:
                self.bar = False
        if self.bar:
            self.bar.update(stage - self.bar.n)
            if stage == stages:
                self.bar.close()
        else:
            end = "\n" if stage == stages else ""
            print(f"\rjitckpt: profiled stage {stage}/{stages}", end=end, file=sys.stderr, flush=True)


def checkpoint(
    module: Any,
    example_inputs: Optional[Sequence[Any]] = None,
    memory_limit: MemoryLimit = 0.5,
    *,
    strategy: str = "optimal",
    schedule: Optional[str] = None,
    slots: int = 500,
    max_stages: int = 0,
    cuts: str = "cheapest",
    segments: int = 0,
    profile_repeats: int = 0,
    verbose: bool = False,
    progress: Optional[Any] = None,
    reuse_profile_of: Optional[torch.jit.ScriptModule] = None,
    front_end: str = "auto",
) -> Union[torch.jit.ScriptModule, CheckpointedModule]:
    """Returns `module` with its forward rewritten to train within `memory_limit` of activations.

    Without example_inputs the rewrite happens now and the plan at the first training call, for
    its inputs and on its device (profiling that call's stages first), then once for every new
    input shape, dtype or device; inference and torch.no_grad() calls never plan. With them, the
    plan is made here; like a call, they may stop before arguments that have defaults.

    memory_limit: bytes (int), a string ("512MiB", "2GiB", "50%"), a fraction (float) of the
    unconstrained peak (activations and the chain's parameter gradients), "min" (the smallest limit that works, with the fastest
    schedule there), "auto" (what the device has available when the plan is made, less a 10%
    margin and the parameter gradients still to come), or None for no limit. strategy: "optimal" (default),
    "periodic", "revolve" or "none", for comparisons. schedule: a schedule of your own over the
    stages and the terminal hand-off ("Fck(1) Fall(2) Fall(3) B(3) B(2) Fall(1) B(1)" for two
    stages, in the notation of jitckpt.plan's "schedule"), run as it is (strategy "given"); one
    that is not valid for the chain, or does not fit memory_limit, is refused, naming why.
    The result shares parameters and buffers
    with `module`; the module itself is left as it was. Profiling shows a progress bar on a
    terminal (tqdm where installed) or with verbose=True (which also prints what each step did);
    progress: a callable(stage, stages) called instead after each profiled stage.
    profile_repeats: timed runs per stage and direction (their median is kept); 0: 5 with example
    inputs, 3 at the first training call (whose step the profile is part of).
    cuts: "cheapest" (default), one cut in each gap between two compute-heavy ops (convolutions,
    linears, attention), the one carrying the fewest bytes; or "every", each cut of a gap that
    carries new tensors (a stem's convolution, norm and pooling apart): finer stages, which lower
    the smallest limit where a gap's own backward bounds it, for a longer profile.
    reuse_profile_of: a module rewritten from the same model and input shapes, whose measured
    stage costs are reused instead of profiling (for an eager module, another eager module's
    checkpoint made with the same example inputs).
    front_end: "auto" (default) captures an eager nn.Module with torch.export on PyTorch 2.6 and
    later and returns a CheckpointedModule (same arguments, same output types, the model's own
    parameters; it captures again for arguments of another structure, non-tensor values, dtype or
    device), and takes a scripted module (and any module on older PyTorch) through TorchScript;
    "export" or "script" choose one.
    """
    options = dict(memory_limit=memory_limit, strategy=strategy, schedule=schedule, slots=slots,
                   max_stages=max_stages, cuts=cuts, segments=segments, profile_repeats=profile_repeats,
                   verbose=verbose, progress=progress)
    if _uncompiled(module) is not module:
        warnings.warn(f"jitckpt.checkpoint takes the {type(module._orig_mod).__name__} that torch.compile wrapped: its "
                      "training calls run as jitckpt plans them, not compiled; to compile the rest of a model around "
                      "a checkpointed part, call torch.compile on what checkpoint returns", stacklevel=2)
        module = module._orig_mod
    refuse_sharded_parts(module)
    if _exports(module, front_end):
        if reuse_profile_of is not None and not isinstance(reuse_profile_of, CheckpointedModule):
            raise ValueError("reuse_profile_of: an eager module reuses the profile of another eager module's "
                             "checkpoint, not of a scripted one")
        _every_cut(cuts), _limit_text(memory_limit)  # refused now, not at the first call
        if example_inputs is None and reuse_profile_of is not None:
            raise ValueError("reuse_profile_of needs the example inputs the profile was measured on")
        rewrite = _RewriteCapture(options)
        wrapped = CheckpointedModule(module, rewrite, fallback=None if front_end == "export" else rewrite.script)
        if example_inputs is not None:
            wrapped.plan_now((example_inputs,) if isinstance(example_inputs, torch.Tensor) else example_inputs,
                             reuse_profile_of)
        return wrapped
    return _checkpoint_scripted(script(module), example_inputs, reuse_profile_of, **options)


class _RewriteCapture:
    """How a CheckpointedModule rewrites a capture, and scripts the model where export cannot
    capture it: checkpoint's options, in an object that copies and pickles with the module."""

    def __init__(self, options: Dict[str, Any]) -> None:
        self.options = options

    def __call__(self, captured: torch.jit.ScriptModule, example_inputs: Optional[Sequence[Any]],
                 reuse_profile_of: Any) -> torch.jit.ScriptModule:
        return _checkpoint_scripted(captured, example_inputs, reuse_profile_of, **self.options)

    def script(self, module: torch.nn.Module, example_inputs: Optional[Sequence[Any]],
               reuse_profile_of: Any) -> torch.jit.ScriptModule:
        if getattr(reuse_profile_of, "front_end", None) != "script":
            reuse_profile_of = None
        return _checkpoint_scripted(script(module), example_inputs, reuse_profile_of, **self.options)


def _checkpoint_scripted(scripted: torch.jit.ScriptModule, example_inputs: Optional[Sequence[Any]],
                         reuse_profile_of: Optional[torch.jit.ScriptModule], *, memory_limit: MemoryLimit,
                         strategy: str, schedule: Optional[str], slots: int, max_stages: int, cuts: str,
                         segments: int, profile_repeats: int, verbose: bool,
                         progress: Optional[Any]) -> torch.jit.ScriptModule:
    if _C.is_rewritten(scripted._c):
        raise ValueError("this module was already rewritten by jitckpt; call checkpoint on the original module")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if example_inputs is None and reuse_profile_of is not None:
        raise ValueError("reuse_profile_of needs the example inputs the profile was measured on")
    reused = None if reuse_profile_of is None else _rewritten(reuse_profile_of, "checkpoint's reuse_profile_of")
    report = (lambda line: print(f"jitckpt: {line}", file=sys.stderr)) if verbose else (lambda line: None)
    if progress is None:
        bar = _ProfileProgress(verbose)
        progress = bar if bar.shown else None
    options = _option_texts(memory_limit=memory_limit, strategy=strategy, schedule=schedule, slots=slots,
                            max_stages=max_stages, cuts=cuts, segments=segments, profile_repeats=profile_repeats,
                            verbose=verbose)
    rewritten = _C.checkpoint(
        scripted._c, None if example_inputs is None else list(example_inputs), options, report, progress,
        _C.costs_json(reused) if reused is not None else "",
        _C.profile_input_key(reused) if reused is not None else "",
        copying_stages=_C.copying_stages(reused) if reused is not None else [],
    )
    return torch.jit._recursive.wrap_cpp_module(rewritten)


def _option_texts(**values: Any) -> Dict[str, str]:
    """The planning options as the text the command line gives them (planner/user_options.h parses
    both); None leaves an option at its default."""
    texts = {}
    for name, value in values.items():
        if name == "memory_limit":
            texts[name] = _limit_text(value)
        elif isinstance(value, bool):
            texts[name] = "true" if value else "false"
        elif value is not None:
            if name not in ("strategy", "schedule", "cuts") and not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
            texts[name] = str(value)
    return texts


def strip(module: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    """The original forward of a module that jitckpt rewrote, sharing its parameters and buffers:
    no jitckpt::chain op and no plan, for export or inference where jitckpt is not installed.
    For a CheckpointedModule, the model itself."""
    module = _uncompiled(module)
    if isinstance(module, CheckpointedModule):
        return module.module
    return torch.jit._recursive.wrap_cpp_module(_C.strip(_rewritten(module, "strip")))


def is_rewritten(module: torch.jit.ScriptModule) -> bool:
    module = _uncompiled(module)
    if isinstance(module, CheckpointedModule):
        return True
    return isinstance(module, torch.jit.ScriptModule) and _C.is_rewritten(module._c)


def dump(module: torch.jit.ScriptModule) -> str:
    """The rewritten forward graph followed by the plan's stages and schedule."""
    return _C.dump(_rewritten(module, "dump"))


def plan(module: torch.jit.ScriptModule) -> Dict[str, Any]:
    """The plan of a rewritten module: schedule, predicted peak (bytes) and time (ms), the stage
    costs, and the whole time-memory curve [(limit bytes, time ms), ...] of the optimal solver.
    It is the plan the module's last call ran: inputs of other shapes get plans of their own,
    listed in "variants" (input shapes, limit, over_limit, schedule; the 16 used last). A module
    rewritten without example inputs has deferred=True; before its first training call only what
    was asked (no "schedule")."""
    return _C.plan_info(_rewritten(module, "plan"))


def partition(module: torch.jit.ScriptModule, example_inputs: Sequence[Any] = (),
              max_stages: int = 0, cuts: str = "cheapest") -> Dict[str, Any]:
    """How checkpoint() would cut `module` into stages: labels, lifted values (parameters,
    buffers, side tensors such as masks), the bytes each boundary carries on `example_inputs`
    (tensor counts without them), and the text form with the reasons for single-stage chains.
    A plain nn.Module with example inputs on PyTorch 2.6 and later is captured as checkpoint()
    captures it."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    module = _uncompiled(module)
    if isinstance(module, CheckpointedModule):
        module = module.module
    if _exports(module, "auto") and example_inputs:  # the stages checkpoint() would cut in the capture
        try:
            args, kwargs = without_cache(module, tuple(example_inputs), {})
            captured = capturing.capture(module, args, kwargs)
            flat = capturing.flatten(args, kwargs)[0]
            return _C.partition(captured.scripted._c, tuple(capturing.arguments(captured, flat)), max_stages,
                                every_cut=_every_cut(cuts))
        except capturing.CaptureError:
            pass  # as checkpoint() does: TorchScript where it can take the model
    scripted = script(module)
    if _C.is_rewritten(scripted._c):
        raise ValueError("this module was already rewritten by jitckpt: jitckpt.plan(module) shows its stages, "
                         "and jitckpt.partition takes the original module")
    return _C.partition(scripted._c, tuple(example_inputs), max_stages, every_cut=_every_cut(cuts))


class cpu_memory:
    """Counts CPU tensor memory exactly inside a `with` block: `.peak` bytes above the start, the
    profiling of a first training call inside the block included."""

    def __enter__(self) -> "cpu_memory":
        _C.start_cpu_memory_counting()
        self.start = _C.reset_cpu_memory_peak()
        self.peak = 0
        return self

    def __exit__(self, *exc: Optional[BaseException]) -> None:
        self.peak = _C.cpu_memory_peak() - self.start
