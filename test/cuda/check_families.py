"""Every model family of test/models/families.py ("test" sizes) on a CUDA GPU: stages, the smallest
limit that works, training bit for bit against the unmodified model (3 steps: outputs, gradients,
buffers), and the measured CUDA peak of a step against the limit, with a loss that holds nothing
beside the output's gradient (the limit is the model's; a cross-entropy's own tensors come on
top). A family fails where it differs from a reference that repeats itself, or where its peak is
over the limit by more than SLACK: the loss and its gradient, two scalars of a 512-byte block
each, which the step holds beside the model, and on PyTorch 2.x up to 5 KB that
nn.TransformerEncoder's fused layers hold beside what the plan counts (test_allocator_blocks.py).

    PYTHONPATH=build-cuda/python python3 test/cuda/check_families.py [--out FILE.json]
        [--autocast bfloat16|float16] [--device cpu [--cpu-block 512]] [NAME ...]

With --autocast, every forward (the plan's too) runs under torch.autocast to that dtype and every
backward outside it, as training loops do.

The unmodified model is trained twice first: a family whose reference does not repeat itself bit
for bit on this GPU (atomics in a backward) is reported as such, not as a jitckpt failure.
Deterministic algorithms are asked for (warn only), so that most do repeat.
"""
import argparse
import contextlib
import json
import os
import sys
import time
import warnings

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

import jitckpt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))  # the model zoo
import families  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import records  # noqa: E402

STEPS = 3
SLACK = 8 * 1024  # bytes
AUTOCAST = {"none": None, "bfloat16": torch.bfloat16, "float16": torch.float16}
autocast_dtype = None  # set by --autocast


def forward_context(family):
    """torch.autocast to --autocast's dtype on the family's device, or nothing."""
    if autocast_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(family.inputs[0].device.type, dtype=autocast_dtype)


def train(model, family, steps=STEPS):
    records = []
    for seed in range(steps):
        torch.manual_seed(seed)
        model.zero_grad(set_to_none=True)
        with torch.jit.optimized_execution(False):
            with forward_context(family):
                output = model(*family.inputs)
            family.loss(output).backward()
        records.append(([t.detach().clone() for t in families.tensors_of(output)],
                        {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()},
                        {n: b.clone() for n, b in model.named_buffers()}))
    return records


def first_difference(a_records, b_records):
    """None when both trainings are the same bit for bit, else where they first differ."""
    for step, ((outs_a, grads_a, bufs_a), (outs_b, grads_b, bufs_b)) in enumerate(zip(a_records, b_records)):
        if len(outs_a) != len(outs_b):
            return f"step {step + 1}: {len(outs_b)} outputs against {len(outs_a)}"
        for i, (a, b) in enumerate(zip(outs_a, outs_b)):
            if a.shape != b.shape or not torch.equal(a, b):
                return f"step {step + 1}: output {i}"
        for n, a in grads_a.items():
            b = grads_b.get(n)
            if (a is None) != (b is None):
                return f"step {step + 1}: gradient of {n} is None on one side"
            if a is not None and not torch.equal(a, b):
                diff = (a.double() - b.double()).abs().max().item()
                return f"step {step + 1}: gradient of {n} (max abs difference {diff:.3g})"
        for n, a in bufs_a.items():
            if not torch.equal(a, bufs_b[n]):
                return f"step {step + 1}: buffer {n}"
    return None


def light_loss(output):
    """(output * fixed weights).sum(): nothing outside the plan beside the output's gradient."""
    outputs = [t for t in families.tensors_of(output) if t.is_floating_point()]
    generator = torch.Generator().manual_seed(7)
    return sum((t * torch.randn(t.shape, generator=generator).to(t)).sum() for t in outputs)


def step_peak(model, family):
    """Bytes a step allocates at its peak above what was allocated before it, .grad freed first."""
    for seed in range(2):
        train(model, family, steps=1)
    model.zero_grad(set_to_none=True)
    if family.inputs[0].device.type == "cpu":  # (a dry run of this script without a GPU)
        with jitckpt.cpu_memory() as memory, torch.jit.optimized_execution(False):
            torch.manual_seed(2)
            with forward_context(family):
                loss = light_loss(model(*family.inputs))
            loss.backward()
        return memory.peak
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(2)
    with torch.jit.optimized_execution(False):
        with forward_context(family):
            loss = light_loss(model(*family.inputs))
        loss.backward()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def check(name, device):
    family = families.FAMILIES[name]("test", device=device)
    row = {"family": name, "blocks": family.blocks}
    start = time.perf_counter()
    reference = train(family.make(0), family)
    repeat = first_difference(reference, train(family.make(0), family))
    row["reference_repeats"] = repeat is None
    with forward_context(family):  # plans for the forward's autocast dtype
        profiled = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None, profile_repeats=1)
        smallest = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit="min",
                                      reuse_profile_of=profiled)
    row["stages"] = jitckpt.plan(profiled)["num_stages"]
    info = jitckpt.plan(smallest)
    row["limit"], row["predicted_peak"] = info["memory_limit"], info["predicted_peak"]
    row["difference_at_min"] = first_difference(reference, train(smallest, family))
    if row["difference_at_min"]:  # from the staging itself, or from what "min" recomputes?
        row["difference_without_limit"] = first_difference(reference, train(profiled, family))
    with forward_context(family):
        at_limit = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=info["memory_limit"],
                                      reuse_profile_of=profiled)
    row["peak_at_min"] = step_peak(at_limit, family)
    row["peak_plain"] = step_peak(family.make(0), family)
    row["peak_over_limit"] = round(row["peak_at_min"] / row["limit"], 3)
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=list(families.FAMILIES))
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a dry run")
    parser.add_argument("--cpu-block", type=int, default=1,
                        help="on the CPU, count memory in blocks of this many bytes (512: as CUDA)")
    parser.add_argument("--autocast", choices=list(AUTOCAST), default="none",
                        help="forward under torch.autocast to this dtype")
    args = parser.parse_args()
    global autocast_dtype
    autocast_dtype = AUTOCAST[args.autocast]
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True, warn_only=True)
    jitckpt._C.set_cpu_allocation_block_for_testing(args.cpu_block)
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "none"
    print(f"PyTorch {torch.__version__}, GPU {gpu}, autocast {args.autocast}", flush=True)
    rows = []
    for name in args.names:
        try:
            row = check(name, args.device)
        except Exception as error:  # a family's failure is a result; go on with the others
            row = {"family": name, "error": f"{type(error).__name__}: {str(error)[:600]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            records.dump({"torch": torch.__version__, "gpu": gpu, "autocast": args.autocast, "rows": rows}, f)
    bad = [r["family"] for r in rows if "error" in r or (r["reference_repeats"] and r["difference_at_min"])
           or r["peak_at_min"] > r["limit"] + SLACK]
    print("FAILED: " + ", ".join(bad) if bad else
          "all families trained bit for bit at their smallest limit, within it")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
