"""A new user's tour: torchvision's classifiers and the architectures of test/models/moe_dit_speech.py
(MoE with sparse routing, DiT, Conformer, a Whisper-like encoder-decoder), each scripted as it is
and trained as people train (AdamW, two micro-batches of gradient accumulation, gradient clipping,
two optimizer steps), in float32 or under torch.autocast, against the unmodified model: outputs,
gradients, parameters and buffers bit for bit, and one step's measured peak against the limit.
Limits: "min", halfway between it and the unconstrained peak ("mid", in bytes), and none; each
planned from example inputs and at the first training call (--front-end export: each model as an
eager module through torch.export, or TorchScript where export cannot capture it, against the eager
model). The unmodified model is trained twice
first: where it does not repeat itself, or does not run (PyTorch's own errors), the model is
skipped and says why.

    PYTHONPATH=build/python:bench /usr/bin/python3 bench/new_user_sweep.py --autocast none,bfloat16 \\
        --out bench/results/cpu/new-user-sweep/sweep-1.13.json resnet18 moe dit

Lines: "<model> <precision> <limit> <how planned>: <stages> stages EXACT|DIFF ... peak/limit".
The peak is one step's above what was live before it, with the caller's tensors the chain holds
added (families.caller_held_bytes), as the tests count it; the loss here makes one scalar.
"""
import argparse
import os
import platform
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torchvision

import jitckpt
import records
from common import use_threads

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))
import families  # noqa: E402
from moe_dit_speech import ARCHITECTURES  # noqa: E402


FRONT_END = "script"  # --front-end


class Subject:
    def __init__(self, name: str, batch: int, image: int) -> None:
        self.name = name
        generator = torch.Generator().manual_seed(0)
        if name in ARCHITECTURES:
            self.build, batches, self.loss = ARCHITECTURES[name]
            self.batches = batches(generator)
            return
        kwargs: Dict[str, Any] = {"num_classes": 10}
        if name in ("inception_v3", "googlenet"):
            kwargs.update(aux_logits=False, init_weights=False)
        if name.startswith("vit"):
            kwargs["image_size"] = image
        self.build = lambda: getattr(torchvision.models, name)(**kwargs)
        size = max(image, 75) if name == "inception_v3" else image
        self.batches = [(torch.randn(batch, 3, size, size, generator=generator),) for _ in range(2)]
        labels = [torch.randint(0, 10, (batch,), generator=generator) for _ in range(2)]
        self.loss = lambda output, inputs: torch.nn.functional.cross_entropy(
            first(output).float(), labels[0 if inputs is self.batches[0] else 1])

    def scripted(self) -> torch.jit.ScriptModule:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.jit.script(self.build().train())

    def fresh(self) -> torch.nn.Module:
        """The model as jitckpt takes it, and as the reference trains: eager with --front-end export."""
        if FRONT_END == "export":
            torch.manual_seed(0)
            return self.build().train()
        return self.scripted()


def first(output):
    """The tensor a loss reads: scripted Inception and GoogLeNet return a tuple."""
    return output[0] if isinstance(output, tuple) else output


def autocast(dtype: Optional[torch.dtype]):
    return torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None)


def train(model, subject: Subject, dtype: Optional[torch.dtype], steps: int = 2) -> List[Any]:
    """Outputs, gradients after clipping, then parameters and buffers after the last step."""
    named = model.module if isinstance(model, jitckpt.CheckpointedModule) else model  # the model's names
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    record: List[Any] = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        for k, inputs in enumerate(subject.batches):
            torch.manual_seed(100 * step + k)  # dropout
            with torch.jit.optimized_execution(False), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # .grad held beside the chain's (accumulation)
                with autocast(dtype):
                    output = model(*inputs)
                    loss = subject.loss(output, inputs) / len(subject.batches)
                loss.backward()
            record.append(first(output).detach().clone())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        record.append({n: p.grad.clone() for n, p in named.named_parameters() if p.grad is not None})
        optimizer.step()
    record.append({n: p.detach().clone() for n, p in named.named_parameters()})
    record.append({n: b.clone() for n, b in named.named_buffers()})
    return record


def difference(a: List[Any], b: List[Any]) -> str:
    """'' where both records are the same bit for bit, else where they first differ."""
    for i, (x, y) in enumerate(zip(a, b)):
        pairs = x.items() if isinstance(x, dict) else [("output", x)]
        other = y if isinstance(y, dict) else {"output": y}
        for name, t in pairs:
            u = other.get(name)
            if u is None or u.shape != t.shape or not torch.equal(t, u):
                gap = "missing" if u is None or u.shape != t.shape else \
                    f"max abs difference {(t.double() - u.double()).abs().max().item():.3g}"
                return f"record {i}, {name}: {gap}"
    return ""


def step_peak(model, subject: Subject, dtype: Optional[torch.dtype]) -> int:
    inputs = subject.batches[0]
    for seed in range(2):  # the second after a warm-up
        torch.manual_seed(seed)
        model.zero_grad(set_to_none=True)
        with torch.jit.optimized_execution(False):
            with jitckpt.cpu_memory() as memory:
                with autocast(dtype):
                    output = model(*inputs)
                    loss = sum((t.float() * 0.5).sum() for t in families.tensors_of(output)
                               if t.is_floating_point())
                loss.backward()
        del output, loss
    rewritten = model.rewritten if isinstance(model, jitckpt.CheckpointedModule) else model
    return memory.peak + families.caller_held_bytes(rewritten, inputs)


def planned(subject: Subject, dtype, limit, deferred: bool, **options) -> torch.jit.ScriptModule:
    with warnings.catch_warnings(), autocast(dtype):
        warnings.simplefilter("ignore")
        return jitckpt.checkpoint(subject.fresh(), None if deferred else subject.batches[0],
                                  memory_limit=limit, profile_repeats=1,
                                  front_end="auto" if FRONT_END == "export" else "script", **options)


def sweep(subject: Subject, dtype: Optional[torch.dtype], limits: List[str], report: Callable) -> None:
    precision = str(dtype).replace("torch.", "") if dtype else "float32"
    try:
        reference = train(subject.fresh(), subject, dtype)
        again = train(subject.fresh(), subject, dtype)
    except RuntimeError as error:
        report(subject.name, precision, skipped=f"the unmodified model fails: {str(error).splitlines()[-1]}")
        return
    if difference(reference, again):
        report(subject.name, precision, skipped=f"the unmodified model differs from itself: {difference(reference, again)}")
        return
    unconstrained = planned(subject, dtype, None, False)
    smallest = planned(subject, dtype, "min", False, reuse_profile_of=unconstrained)
    top, low = jitckpt.plan(unconstrained)["predicted_peak"], jitckpt.plan(smallest)["memory_limit"]
    chosen = {"min": "min", "mid": (low + top) // 2, "none": None}
    for name in limits:
        for deferred in (False, True):
            how = "first call" if deferred else "example inputs"
            try:
                model = planned(subject, dtype, chosen[name], deferred)
                record = train(model, subject, dtype)
                info = jitckpt.plan(model)
                peak = step_peak(model, subject, dtype)
            except (RuntimeError, jitckpt.export.CaptureError) as error:
                report(subject.name, precision, limit=name, how=how, error=str(error).splitlines()[-1][:300])
                continue
            report(subject.name, precision, limit=name, how=how, front_end=getattr(model, "front_end", "script"),
                   stages=info["num_stages"],
                   difference=difference(reference, record), peak=peak, memory_limit=info["memory_limit"],
                   smallest_fraction=low / top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="torchvision names (resnet18, vit_b_16, ...) or "
                        + ", ".join(ARCHITECTURES))
    parser.add_argument("--autocast", default="none", help="none,bfloat16,float16 (comma-separated)")
    parser.add_argument("--limits", default="min,mid,none")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--image", type=int, default=64, help="torchvision's input size (ViT: 32)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--onednn", choices=["on", "off"], default="on",
                        help="off as the suite runs 2.x: Debian's 2.6 oneDNN (docs/troubleshooting.md)")
    parser.add_argument("--front-end", default="script", choices=["script", "export"],
                        help="export: the eager model through torch.export (2.6 on), against eager")
    parser.add_argument("--out", help="JSON of every check")
    args = parser.parse_args()
    global FRONT_END
    FRONT_END = args.front_end
    threads = use_threads(args.threads)
    torch.backends.mkldnn.enabled = args.onednn == "on"
    rows: List[Dict[str, Any]] = []

    def report(model: str, precision: str, **row) -> None:
        rows.append({"model": model, "precision": precision, **row})
        if "skipped" in row:
            print(f"{model} {precision}: skipped, {row['skipped']}", flush=True)
        elif "error" in row:
            print(f"{model} {precision} {row['limit']} {row['how']}: ERROR {row['error']}", flush=True)
        else:
            verdict = "EXACT" if not row["difference"] else f"DIFF {row['difference']}"
            print(f"{model} {precision} {row['limit']} {row['how']} ({row['front_end']}): {row['stages']} stages {verdict} "
                  f"peak/limit {row['peak'] / row['memory_limit']:.4f} ({row['peak'] - row['memory_limit']:+d} B)",
                  flush=True)

    started = time.time()
    for name in args.models:
        for text in args.autocast.split(","):
            dtype = None if text == "none" else getattr(torch, text)
            sweep(Subject(name, args.batch, 32 if name.startswith("vit") else args.image), dtype,
                  args.limits.split(","), report)
    checks = [r for r in rows if "difference" in r]
    print(f"new_user_sweep: {len(checks)} checks, {sum(1 for r in checks if r['difference'])} differ, "
          f"{sum(1 for r in checks if r['limit'] != 'none' and r['peak'] > r['memory_limit'] + families.OUTSIDE_CHAIN_BYTES)} "
          f"over their limit by more than {families.OUTSIDE_CHAIN_BYTES} B, "
          f"{sum(1 for r in rows if 'error' in r)} errors, {sum(1 for r in rows if 'skipped' in r)} skipped, "
          f"{time.time() - started:.0f} s", flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            records.dump({"command": " ".join(sys.argv), "torch": torch.__version__, "threads": threads,
                       "onednn": args.onednn,
                       "machine": platform.machine(), "rows": rows}, f)


if __name__ == "__main__":
    main()
