"""CheckpointedModule: a plain nn.Module trained through jitckpt, with its own call and output types.

A training call (gradients enabled) is served by a capture of the model for calls like it
(capture.py) that jitckpt rewrote; the first call of a new kind captures and rewrites again (the
rewritten module plans at its own first call, as a deferred TorchScript module does). Calls with
gradients disabled run the model itself; training calls of a Hugging Face model run without its
key-value cache (hugging_face.py). Parameters and buffers are the model's own, so optimizers,
state_dict and BatchNorm statistics stay with it. A model that export cannot capture trains through
a fallback where one is given (TorchScript, for "auto"), with one warning. torch.compile calls its
forward as it is, around the parts of a model it compiles.
"""
import contextlib
import inspect
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from .. import _C
from ..sharding import is_sharded, refuse_flat_parameter_views
from . import capture as capturing
from . import python_attributes
from .hugging_face import without_cache
from .module_hooks import has_backward_hooks

# (captured graph or model, example inputs or None, a module whose profile to reuse or None)
Rewrite = Callable[[torch.jit.ScriptModule, Optional[Sequence[Any]], Any], torch.jit.ScriptModule]
Fallback = Callable[[torch.nn.Module, Optional[Sequence[Any]], Any], torch.jit.ScriptModule]


def outside_compile(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` as torch.compile calls it: run, never traced. A training call captures, plans and
    runs a graph that TorchScript's interpreter executes; Dynamo, tracing it, would step through
    export's own code and break its graph at each step, with a warning for each kind of break."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)  # PyTorch 2.1 and later
    return function if disable is None else disable(function)


@contextlib.contextmanager
def _jitckpt_errors_alone() -> Iterator[None]:
    """jitckpt's own errors (a limit no schedule fits at the first call, say) as jitckpt says them:
    raised inside the rewritten module, they come wrapped in a report of TorchScript's interpreter,
    which the user of an eager model never asked for."""
    try:
        yield
    except RuntimeError as error:
        text = str(error)
        start = text.find("jitckpt: ")
        if start <= 0 or "TorchScript" not in text[:start]:
            raise
        raise RuntimeError(text[start:].strip()) from None


def _converted(held: List[Optional[torch.Tensor]], tensors: List[Optional[torch.Tensor]]) -> bool:
    """Whether every tensor the model holds now is the one held before, or one in its place with
    another dtype or device (`nn.Module.to`, `.double()`: buffers are new tensors, as parameters are
    where PyTorch is set to overwrite them)."""
    if len(held) != len(tensors):
        return False
    return all(a is b or (a is not None and b is not None and (a.dtype, a.device) != (b.dtype, b.device))
               for a, b in zip(held, tensors))


class CheckpointedModule(torch.nn.Module):
    """`module` trained within a memory limit; `.module` is the model itself."""

    max_captures = 8  # least recently used dropped: a run over many argument kinds stays bounded

    def __init__(self, module: torch.nn.Module, rewrite: Rewrite, fallback: Optional[Fallback] = None) -> None:
        super().__init__()
        self.module = module
        self._rewrite = rewrite
        self._fallback = fallback
        self._scripted: Optional[torch.jit.ScriptModule] = None  # the fallback, once taken
        self._scripted_attributes: List[python_attributes.Attribute] = []  # the values it was scripted with
        self._captures: List[Tuple[capturing.Capture, torch.jit.ScriptModule]] = []
        self._limit_so_far = 0  # bytes the limit has meant for the captures so far
        # The model's parameters and buffers when the captures (or the fallback) were made.
        self._tensors: Optional[List[Optional[torch.Tensor]]] = None
        self._attributes_said: set = set()  # Python values whose change was warned of
        self._static_said = False  # whether a size export kept static was warned of
        self._make_instance_forward()

    def _make_instance_forward(self) -> None:
        """`self.forward` as inspect.signature reads it takes the model's arguments, not (*args,
        **kwargs): code that reads which arguments a model takes (Hugging Face's Trainer drops every
        batch key its forward does not name) reads the model's. And torch.compile calls it as it is
        (outside_compile, here rather than on the class: it imports Dynamo, which `import jitckpt`
        need not)."""
        method = type(self).forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            return method(self, *args, **kwargs)

        try:
            forward.__signature__ = inspect.signature(self.module.forward)  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            pass
        forward.__doc__ = self.module.forward.__doc__
        self.__dict__["forward"] = outside_compile(forward)

    def plan_now(self, example_inputs: Sequence[Any], reuse_profile_of: Any = None) -> None:
        """Captures and plans for example inputs (positional arguments) instead of the first call,
        reusing the profile of another checkpoint of the model made with the same inputs."""
        flags, tensors = capturing.model_state(self.module)
        self._forget_other_tensors(tensors)
        try:
            self._entry(tuple(example_inputs), {}, flags, plan_with_inputs=True, reuse_profile_of=reuse_profile_of)
        except capturing.CaptureError as error:
            if self._fallback is None:
                raise self._refusal(error) from error
            self._take_fallback(error, example_inputs, reuse_profile_of)

    def __getstate__(self) -> Dict[str, Any]:
        """What copy.deepcopy and pickle take: the model and the options, not the captures, whose
        graphs and plans hold this module's own tensors (a copy's would train the original's);
        a copy captures and plans its own at its first training call."""
        state = dict(self.__dict__)
        state.pop("forward", None)  # a closure over this module: the copy makes its own
        state["_modules"] = {name: m for name, m in self._modules.items() if name != "_scripted"}
        state["_scripted"] = None
        state["_scripted_attributes"] = []
        state["_captures"] = []
        state["_tensors"] = None
        return state

    def __getattr__(self, name: str) -> Any:
        """The model's own attributes (its config, its loss type, its methods) read through this
        module, as through torch.compile's: code written for the model finds them here (Hugging
        Face's Trainer counts a causal model's tokens by its loss type)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            module = self.__dict__.get("_modules", {}).get("module")
            if module is None:
                raise
            return getattr(module, name)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)
        self._make_instance_forward()

    @property
    def rewritten(self) -> Optional[torch.jit.ScriptModule]:
        """The rewritten module the last training call ran (None before the first)."""
        if self._scripted is not None:
            return self._scripted
        return self._captures[0][1] if self._captures else None

    @property
    def front_end(self) -> str:
        """"export", or "script" once the model trains through TorchScript instead."""
        return "script" if self._scripted is not None else "export"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.module(*args, **kwargs)
        flags, tensors = capturing.model_state(self.module)
        self._forget_other_tensors(tensors)
        with _jitckpt_errors_alone():
            if self._scripted is not None and not python_attributes.hold(self._scripted_attributes):
                self._say_which_attributes_changed(self._scripted_attributes)  # scripting copied them
                self._scripted = None
            if self._scripted is not None:
                return self._scripted(*args, **kwargs)
            try:
                captured, rewritten, flat = self._entry(args, kwargs, flags)
            except capturing.CaptureError as error:
                if self._fallback is None or self._captures:
                    raise self._refusal(error) from error
                self._take_fallback(error, None)
                return self._scripted(*args, **kwargs)
            try:
                with torch.jit.optimized_execution(False):
                    result = rewritten(*capturing.arguments(captured, flat))
            except RuntimeError as error:
                if len(self._captures) > 1 and "the given schedule" in str(error):
                    raise RuntimeError(f"{str(error).rstrip()}; export captured the model again for these inputs, "
                                       "into a chain other than the one the schedule was written for: give a "
                                       "schedule only for inputs one capture serves, leave the schedule to jitckpt, "
                                       "or train through TorchScript (front_end=\"script\"), whose one graph serves "
                                       "every size") from None
                raise
            return capturing.outputs(captured, result)

    def _forget_other_tensors(self, tensors: List[Optional[torch.Tensor]]) -> None:
        """The captures and the fallback hold the model's parameters and buffers as they were made
        with (`tensors`: capture.model_state's): where the model holds other tensors now
        (`load_state_dict(..., assign=True)`, a layer replaced, `torch.func.functional_call`), they
        would train the old ones, silently. They go, with a warning, and the call captures again. A
        model moved to another dtype or device (`model.double()`, `.to("cuda")`) plans again without
        one, as any call with new dtypes or devices does."""
        held = self._tensors
        if held is None or (len(held) == len(tensors) and all(a is b for a, b in zip(held, tensors))):
            self._tensors = tensors
            return
        refuse_flat_parameter_views(self.module)  # before anything changes: the next call is refused too
        self._tensors = tensors
        if (self._captures or self._scripted is not None) and not is_sharded(self) and not _converted(held, tensors):
            kept = {id(t) for t in held}
            named = list(self.module.named_parameters()) + list(self.module.named_buffers())
            changed = next((name for name, t in named if id(t) not in kept), None)
            what = f"'s {changed} is another tensor" if changed else " holds other parameters or buffers"
            warnings.warn(f"{type(self.module).__name__}{what} than when jitckpt captured the "
                          "model (load_state_dict(assign=True), a layer replaced, torch.func.functional_call): "
                          "jitckpt captures and plans it again, for the tensors it holds now", stacklevel=2)
        self._captures = []
        self._scripted = None

    def _take_fallback(self, error: Exception, example_inputs: Optional[Sequence[Any]],
                       reuse_profile_of: Any = None) -> None:
        """TorchScript for a model export cannot capture; if it cannot script either, export's error."""
        assert self._fallback is not None
        try:
            self._scripted_attributes = python_attributes.record(self.module)
            self._scripted = self._fallback(self.module, example_inputs, reuse_profile_of)
        except (TypeError, RuntimeError) as script_error:
            lines = str(script_error).strip().splitlines()
            reason = lines[0] if lines else type(script_error).__name__
            raise self._refusal(f"{error}; and TorchScript could not take it either ({reason})") from script_error
        warnings.warn(f"{error}; {type(self.module).__name__} trains through TorchScript instead", stacklevel=3)

    def _say_which_attributes_changed(self, recorded: List[python_attributes.Attribute]) -> None:
        """Once per attribute: a Python value the model's modules hold changed, so a new capture."""
        changes = [a for a in python_attributes.changed(recorded) if a.name not in self._attributes_said]
        if not changes:
            return
        self._attributes_said.update(a.name for a in changes)
        described = ", ".join(map(python_attributes.change, changes))
        warnings.warn(f"{type(self.module).__name__}'s {described} changed since jitckpt captured the model: "
                      "export records such values as constants, so jitckpt captures the model again, once for each "
                      "value; a value that changes every step is better given to forward as a tensor, or kept in a "
                      "buffer, which one capture serves", stacklevel=2)

    def _say_which_size_is_static(self, flat: List[Any], spec: Any, flags: Tuple[bool, ...]) -> None:
        """Once: a capture would serve the call but for a size that export kept static (an image's
        height, or one export specialized), so each new size is a capture."""
        if self._static_said:
            return
        missed = next(filter(None, (c.static_size_missed(flat, spec, flags) for c, _ in self._captures)), None)
        if missed is None:
            return
        self._static_said = True
        index, dim = missed
        tensor = capturing.tensor_leaves(flat)[index]
        why = "an image's size is kept static" if tensor.is_floating_point() and tensor.dim() >= 4 else \
            "export could not keep it dynamic"
        warnings.warn(f"{type(self.module).__name__}'s tensor argument {index} has another size in dimension {dim} "
                      f"than when jitckpt captured the model, and that size is static in the capture ({why}): each "
                      f"new size of it is captured, cut and profiled again (the {self.max_captures} captures used "
                      "last are kept); where the model scripts, front_end=\"script\" plans new sizes on one graph, "
                      "from the profiles of earlier ones", stacklevel=3)

    def _refusal(self, error: Any) -> capturing.CaptureError:
        """The error of a model jitckpt cannot take whole, with the part of it that it may take: the
        child with a forward of its own and parameters that holds the most modules (a detector's
        backbone, a language model's decoder), checkpointed on its own while the rest of forward
        runs as it is."""
        parts = [(sum(1 for _ in child.modules()), name) for name, child in self.module.named_children()
                 if type(child).forward is not torch.nn.Module.forward and any(True for _ in child.parameters())]
        name = max(parts, key=lambda part: part[0])[1] if parts else None
        if name is None or has_backward_hooks(getattr(self.module, name)):  # it would be refused the same
            return capturing.CaptureError(str(error))
        return capturing.CaptureError(
            f"{error}; to train the rest of {type(self.module).__name__} as it is, checkpoint the part that holds "
            f"its activations instead: `model.{name} = jitckpt.checkpoint(model.{name}, memory_limit=...)`")

    def _entry(self, args: Tuple[Any, ...], kwargs: Any, flags: Tuple[bool, ...], plan_with_inputs: bool = False,
               reuse_profile_of: Any = None) -> Tuple[capturing.Capture, torch.jit.ScriptModule, List[Any]]:
        """The capture that serves the call (`flags`: the model's training flags now), made where
        none does, and the call's flat leaves."""
        args, kwargs = without_cache(self.module, args, kwargs)
        flat, spec = capturing.flatten(args, kwargs)
        for i, (captured, rewritten) in enumerate(self._captures):
            if captured.serves(flat, spec, flags):
                self._captures.insert(0, self._captures.pop(i))
                return captured, rewritten, flat
        if self._captures:
            self._say_which_attributes_changed(self._captures[0][0].attributes)
            self._say_which_size_is_static(flat, spec, flags)
        captured = capturing.capture(self.module, args, kwargs)
        example = capturing.arguments(captured, flat) if plan_with_inputs else None
        rewritten = self._rewrite(captured.scripted, example, reuse_profile_of)
        # A new capture keeps to what the limit meant for the others (a fraction's bytes; a batch of
        # one, which export captures apart, never stops training where a larger one trained).
        self._limit_so_far = max([self._limit_so_far] + [_C.limit_so_far(r._c) for _, r in self._captures])
        if self._limit_so_far > 0:
            _C.hold_limit(rewritten._c, self._limit_so_far)
        self._captures.insert(0, (captured, rewritten))
        del self._captures[self.max_captures:]
        return captured, rewritten, flat
