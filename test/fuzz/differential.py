"""One differential check: a random model (generate.py) trained with jitckpt against its unmodified
twin. Takes a model spec and a Config (limit, example inputs or deferred planning, float32 or
autocast to bfloat16 or float16 (on the CPU where its autocast takes float16: 2.x), strategy or a
random valid schedule), on the CPU or, with DEVICE, CUDA; trains both for two AdamW steps of two
micro-batches with gradient clipping; returns an Outcome: "exact" (outputs, every .grad, parameter
and buffer bit for bit, and the measured step peak within the limit), "fail" (with what differed),
or why the model was not compared ("nondeterministic", "unsupported", "refused"), or "shared-cast"
(under autocast, a weight that several stages cast each for itself, or that the forward casts
after the chain again: last bits differ by design, docs/supported.md)."""
import contextlib
import copy
import os
import sys
import dataclasses
import random
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

import jitckpt

import generate

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
from families import caller_held_bytes, cpu_autocast_casts_to, tensors_of  # noqa: E402

DEVICE = "cpu"  # or "cuda" (fuzz.py --device): models, inputs and autocast there
FRONT_END = "script"  # or "export" (fuzz.py --front-end): jitckpt takes the eager model, the reference too
STEPS = 2
MICRO_BATCHES = 2
RECHECKS = 4  # more runs of the reference before a difference is called a failure
# The step peak against the limit: the plan counts activations and parameter gradients; the step
# also holds a few scalars, and on 2.6 a few hundred bytes not found yet (docs/development.md, fuzz
# campaigns).
PEAK_SLACK = (1.02, 16 * 1024)
LIMITS = ["none", "min", "between"]
STRATEGIES = ["optimal", "optimal", "periodic", "revolve", "given", "given"]


@dataclasses.dataclass
class Config:
    limit: str = "min"  # "none", "min", "between" (bytes drawn between the smallest and the peak)
    deferred: bool = False  # no example inputs: planned at the first training call
    autocast: bool = False  # forward under torch.autocast(DEVICE, autocast_dtype)
    autocast_dtype: str = "bfloat16"  # or "float16"
    strategy: str = "optimal"  # or "periodic", "revolve", "given" (a random valid schedule)
    seed: int = 0  # draws the limit and the schedule
    cuts: str = "cheapest"  # or "every": the partition's finer stages
    # The step peak's slack over the limit, (factor, bytes); None: PEAK_SLACK. A regression of a
    # peak over the limit replays at the slack that found it.
    peak_slack: Optional[Tuple[float, int]] = None
    # Each micro-batch's batch size or sequence length (`varies`: "batch" or "length"), in order
    # (fuzz.py --batches, --lengths); None: the model's own for all of them. Sizes met after four
    # others are planned from costs predicted from their profiles.
    sizes: Optional[List[int]] = None
    varies: str = "batch"


FLOAT16_AUTOCAST = cpu_autocast_casts_to(torch.float16)


def autocast_on_this_device(dtype: str) -> bool:
    """Whether autocast on DEVICE takes `dtype` (the CPU's takes float16 from 2.x on)."""
    return dtype != "float16" or DEVICE == "cuda" or FLOAT16_AUTOCAST


def draw_config(rng: random.Random) -> Config:
    config = Config(limit=rng.choice(LIMITS), deferred=rng.random() < 0.35, autocast=rng.random() < 0.4,
                    strategy=rng.choice(STRATEGIES), seed=rng.randrange(1 << 30),
                    cuts="every" if rng.random() < 0.3 else "cheapest")
    if config.autocast and autocast_on_this_device("float16") and rng.random() < 0.5:
        config.autocast_dtype = "float16"
    return config


def autocast_to(config: Config) -> Optional[torch.dtype]:
    """The dtype the config's forward autocasts to; None: no autocast."""
    return getattr(torch, config.autocast_dtype) if config.autocast else None


def autocast_on_device(dtype: Optional[torch.dtype]):
    return torch.autocast(DEVICE, dtype=dtype or torch.bfloat16, enabled=dtype is not None)


class _Peak:
    peak = 0


@contextlib.contextmanager
def peak_memory():
    """Bytes allocated at the peak of the block above what was allocated before it, on DEVICE."""
    if DEVICE == "cpu":
        with jitckpt.cpu_memory() as memory:
            yield memory
        return
    result = _Peak()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    yield result
    torch.cuda.synchronize()
    result.peak = torch.cuda.max_memory_allocated() - base


@dataclasses.dataclass
class Outcome:
    status: str  # exact, fail, nondeterministic, unsupported, refused, shared-cast
    detail: str = ""
    stages: int = 0
    predicted: int = 0  # plans made from predicted costs (Config.sizes)


# Errors jitckpt gives on purpose, for a limit or strategy that cannot work or a forward it cannot
# cut (docs/supported.md): clear refusals, counted apart.
# ("runs forward once": on CUDA, a periodic, revolve-style or drawn schedule that would recompute a
# stage whose cuDNN RNN dropout cannot be replayed; "into a chain other than": a drawn schedule, and
# inputs of another size that export captured apart.)
REFUSALS = ("smallest limit", "does not fit", "above the memory limit", "no schedule", "cannot reach",
            "jitckpt cannot cut forward", "runs forward once", "into a chain other than")


def loss_of(output: Any) -> torch.Tensor:
    """(output * fixed weights).sum() over the floating outputs."""
    generator = torch.Generator().manual_seed(11)
    terms = [(t.float() * torch.randn(t.shape, generator=generator).to(t.device)).sum()
             for t in tensors_of(output) if t.is_floating_point() and t.requires_grad]
    return sum(terms) if terms else torch.zeros((), requires_grad=True, device=DEVICE)


def same_bits(a: Optional[torch.Tensor], b: Optional[torch.Tensor]) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.detach().contiguous().view(bits), b.detach().contiguous().view(bits))


Record = Tuple[List[torch.Tensor], Dict[str, Optional[torch.Tensor]], Dict[str, torch.Tensor]]


def train(model: torch.nn.Module, batches: List[Tuple], autocast: Optional[torch.dtype]) -> List[Record]:
    """AdamW steps of MICRO_BATCHES of `batches` each with clipping: outputs, gradients (after
    clipping), then parameters and buffers after each step."""
    named = model.module if isinstance(model, jitckpt.CheckpointedModule) else model  # the model's own names
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    records = []
    for step in range(len(batches) // MICRO_BATCHES):
        optimizer.zero_grad(set_to_none=True)
        outputs = []
        for micro in range(MICRO_BATCHES):
            torch.manual_seed(100 * step + micro)  # dropout
            with torch.jit.optimized_execution(False):
                with autocast_on_device(autocast):
                    output = model(*batches[step * MICRO_BATCHES + micro])
                    loss = loss_of(output) / MICRO_BATCHES
                loss.backward()
            outputs += [t.detach().clone() for t in tensors_of(output)]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        grads = {n: None if p.grad is None else p.grad.clone() for n, p in named.named_parameters()}
        optimizer.step()
        state = {n: p.detach().clone() for n, p in named.named_parameters()}
        state.update({"buffer " + n: b.clone() for n, b in named.named_buffers()})
        records.append((outputs, grads, state))
    return records


def difference(reference: List[Record], other: List[Record]) -> Optional[str]:
    """What first differs, or None."""
    for step, ((outs_a, grads_a, state_a), (outs_b, grads_b, state_b)) in enumerate(zip(reference, other)):
        if len(outs_a) != len(outs_b):
            return f"step {step + 1}: {len(outs_b)} output tensors, expected {len(outs_a)}"
        for i, (a, b) in enumerate(zip(outs_a, outs_b)):
            if not same_bits(a, b):
                return f"step {step + 1}: output {i} differs"
        for kind, a_all, b_all in (("gradient", grads_a, grads_b), ("value", state_a, state_b)):
            if a_all.keys() != b_all.keys():
                return f"step {step + 1}: names differ: {sorted(a_all.keys() ^ b_all.keys())}"
            for name, a in a_all.items():
                if not same_bits(a, b_all[name]):
                    what = "missing" if b_all[name] is None else "extra" if a is None else "differs"
                    return f"step {step + 1}: {kind} of {name} {what}"
    return None


def random_schedule(stages: int, rng: random.Random, runs_once: Sequence[int] = ()) -> str:
    """A random persistent schedule over `stages` stages and the terminal hand-off (stage
    stages + 1): each segment is either kept whole (Fall) or checkpointed at its start (Fck),
    advanced without keeping (Fn) to a random split, and solved right part first. A stage of
    `runs_once` (the plan's costs) is never in a run that is recomputed."""
    ops: List[str] = []

    def solve(s: int, t: int) -> None:  # a^{s-1} held, backward of stages s..t
        last = min([k for k in runs_once if s <= k <= t] + [t])  # the last split allowed
        if s == t:
            ops.extend([f"Fall({s})", f"B({s})"])
        elif s == last or rng.random() < 0.35:
            ops.append(f"Fall({s})")
            solve(s + 1, t)
            ops.append(f"B({s})")
        else:
            split = rng.randint(s + 1, last)
            ops.append(f"Fck({s})")
            ops.extend(f"Fn({k})" for k in range(s + 1, split))
            solve(split, t)
            solve(s, split - 1)

    solve(1, stages + 1)
    return " ".join(ops)


def _checkpoint(fresh, example, config: Config, rng: random.Random) -> torch.jit.ScriptModule:
    """The model rewritten for `config`; under autocast when the config trains under it, as the
    profile must see the casts."""
    with autocast_on_device(autocast_to(config)), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deferred planning, replans
        options: Dict[str, Any] = dict(profile_repeats=1, cuts=config.cuts, front_end=FRONT_END)
        limit: Any = {"none": None, "min": "min"}.get(config.limit)
        if config.limit == "between" and config.deferred:
            limit = rng.uniform(0.3, 1.0)  # a fraction: the peak is not known before the call
        elif config.limit == "between" or config.strategy == "given":
            probe = jitckpt.checkpoint(fresh(), example, memory_limit="min", **options)
            if example is not None:
                options["reuse_profile_of"] = probe
            if config.strategy == "given":  # the stages are known before planning
                info = jitckpt.plan(probe)  # costs: none yet where planning is deferred
                runs_once = info.get("costs", {}).get("runs_once", [])
                options["schedule"] = random_schedule(info["num_stages"], rng, runs_once)
                limit = None
            else:
                info = jitckpt.plan(probe)
                limit = rng.randint(info["memory_limit"], max(info["memory_limit"], info["unconstrained_peak"]))
        if config.strategy in ("periodic", "revolve"):
            options["strategy"] = config.strategy
        return jitckpt.checkpoint(fresh(), example, memory_limit=limit, **options)


def step_peak(model, batch, autocast: Optional[torch.dtype]) -> Tuple[int, int]:
    """The measured step peak, and what the loss itself held above the model's output and its
    gradient (loss_memory): memory of the caller's, which no plan of the model counts."""
    model.zero_grad(set_to_none=True)
    with torch.jit.optimized_execution(False), peak_memory() as memory:
        with autocast_on_device(autocast):
            output = model(*batch)
            loss = loss_of(output)
        loss.backward()
    return memory.peak, loss_memory(output, autocast)


def loss_memory(output: Any, autocast: Optional[torch.dtype]) -> int:
    """The peak of loss_of and its backward on stand-ins for `output`, less the stand-ins'
    gradients (the plan counts the output's): under autocast, a float32 copy of each output, the
    fixed weights and the products, several times the output's size."""
    leaves = [t.detach().requires_grad_() for t in tensors_of(output)
              if t.is_floating_point() and t.requires_grad]
    with peak_memory() as memory:
        with autocast_on_device(autocast):
            loss = loss_of(leaves)
        loss.backward()
    return max(0, memory.peak - sum(t.numel() * t.element_size() for t in leaves))


def check(spec: generate.Spec, config: Config, directory: str) -> Outcome:
    if config.sizes:  # the model made for the largest size; each batch sliced from its inputs
        spec = dict(spec, **{"batch" if config.varies == "batch" else "size": max(config.sizes)})
    module = generate.load(spec, directory)
    torch.manual_seed(config.seed)
    eager = module.Model().train().to(DEVICE)
    generator = torch.Generator().manual_seed(config.seed)  # on the CPU: the same inputs on every device
    batches = [tuple(t.to(DEVICE) for t in module.make_inputs(generator))
               for _ in range(len(config.sizes or []) or STEPS * MICRO_BATCHES)]
    if config.sizes:
        batches = [sliced(batch, size, config.varies, spec["size"]) for batch, size in zip(batches, config.sizes)]

    def fresh() -> torch.nn.Module:  # copies of the eager module: 1.13's copies of scripted ones are not leaves
        return copy.deepcopy(eager) if FRONT_END == "export" else torch.jit.script(copy.deepcopy(eager))

    try:
        reference = train(fresh(), batches, autocast_to(config))
    except RuntimeError as e:
        return Outcome("unsupported", f"the unmodified model does not train: {str(e).strip().splitlines()[-1]}")
    twice = difference(reference, train(fresh(), batches, autocast_to(config)))
    if twice is not None:
        return Outcome("nondeterministic", twice)
    rng = random.Random(config.seed)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # (an eager module has no stages before it is captured: a schedule of one's own needs inputs)
            deferred = config.deferred and not (FRONT_END == "export" and config.strategy == "given")
            model = _checkpoint(fresh, None if deferred else batches[0], config, rng)
            ours = train(model, batches, autocast_to(config))
    except jitckpt.export.CaptureError as e:  # what export or jitckpt cannot capture, said as such
        return Outcome("refused", str(e).strip().splitlines()[0][:300])
    except RuntimeError as e:
        text = str(e).strip()
        if any(r in text for r in REFUSALS):
            return Outcome("refused", text.splitlines()[-1])
        return Outcome("fail", f"jitckpt raised: {text[:2000]}")
    info = jitckpt.plan(model)
    stages = info["num_stages"]
    what = difference(reference, ours)
    if what is not None:
        # docs/supported.md: a weight that several stages cast under autocast gets its gradient
        # summed in float32, not in the autocast dtype; a warning names it where the stages are in
        # the chain (not where one use is before or after it). Counted apart, not compared.
        shared = [str(w.message) for w in caught if "both cast" in str(w.message)]
        if shared or (config.autocast and spec.get("shared")):
            return Outcome("shared-cast", (shared or [what])[0][:200], stages)
        # Two equal runs do not prove a reference deterministic (2.6's oneDNN kernels differ now
        # and then): a difference counts only where more runs of the reference all agree.
        for _ in range(RECHECKS):
            again = difference(reference, train(fresh(), batches, autocast_to(config)))
            if again is not None:
                return Outcome("nondeterministic", f"{again} (found rechecking: {what})", stages)
        return Outcome("fail", what, stages)
    plans = {str(p["input_shapes"]): p for p in [info] + info.get("variants", [])}.values()  # the last is a variant too
    if info.get("memory_limit") is not None and config.strategy != "given":
        firsts: Dict[Tuple[int, ...], Tuple] = {}
        for batch in batches:  # the first of each size
            firsts.setdefault(tuple(batch[0].shape), batch)
        for batch in firsts.values():
            over = peak_over_limit(model, batch, config)
            if over is not None:
                return Outcome("fail", over, stages)
    return Outcome("exact", "", stages, sum(1 for p in plans if p.get("predicted_costs")))


def sliced(batch: Tuple, size: int, varies: str, length: int) -> Tuple:
    """The batch's first `size` samples, or every sample's first `size` positions (dim 1 where it is
    the model's sequence `length`), each in memory of its own, as a data loader gives them."""
    if varies == "batch":
        return tuple(t[:size].clone(memory_format=torch.contiguous_format) for t in batch)
    return tuple(t[:, :size].clone(memory_format=torch.contiguous_format) if t.dim() > 1 and t.shape[1] == length
                 else t for t in batch)


def peak_over_limit(model, batch: Tuple, config: Config) -> Optional[str]:
    """What a step on `batch` held over the limit of the plan it ran, or None."""
    peak, loss_bytes = step_peak(model, batch, autocast_to(config))
    peak += caller_held_bytes(model.rewritten if FRONT_END == "export" else model, batch)  # counted in the limit, allocated before the step
    limit = jitckpt.plan(model)["memory_limit"]  # the plan of this step's input key
    factor, extra = config.peak_slack or PEAK_SLACK
    if peak <= limit * factor + extra + loss_bytes:
        return None
    return (f"step peak {peak} bytes over the limit {limit} for inputs {[list(t.shape) for t in batch]} "
            f"(x{peak / limit:.3f}; the loss held {loss_bytes})")
