"""Where a family's CUDA step peaks at its smallest limit: the allocations live at the peak, by the
frames that made them, from torch.cuda.memory's allocation history (what check_families.py reports
as peak_at_min, taken apart).

    PYTHONPATH=build-cuda/python python3 test/cuda/trace_peak.py [--autocast bfloat16] NAME ...
"""
import argparse
import collections
import os
import sys
import warnings

os.environ.setdefault("TORCH_SYMBOLIZE_MODE", "dladdr")  # function names only: fast
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_families as cf  # noqa: E402
import jitckpt  # noqa: E402
import torch  # noqa: E402

families = cf.families
KEEP = ("jitckpt", "at::native", "at::cuda", "cudnn", "cublas", "autograd", "Engine", "Function",
        "check_families", "families")


def frame_text(frames, count=8):
    names = []
    for f in frames:
        name = f.get("name", "?")
        if any(k in name or k in f.get("filename", "") for k in KEEP) and "record_memory" not in name:
            names.append(name[:90] + ("@" + os.path.basename(f["filename"]) + ":" + str(f["line"])
                                      if f.get("filename", "").endswith(".py") else ""))
        if len(names) >= count:
            break
    return " < ".join(names) or "?"


def block_sizes(snapshot):
    """Address -> bytes the allocator counts, for the blocks still allocated at the snapshot: a
    large block given whole (its remainder under 1 MiB is not split off) counts more than asked."""
    sizes = {}
    for segment in snapshot["segments"]:
        address = segment["address"]
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                sizes[address] = block["size"]
            address += block["size"]
    return sizes


def analyse(trace, base, sizes):
    live, unknown_freed, total, best, best_at = {}, 0, 0, -1, -1
    for i, e in enumerate(trace):
        a = e["action"]
        if a == "alloc":
            live[e["addr"]] = e
            total += e["size"]
        elif a == "free_completed":
            if e["addr"] in live:
                total -= live.pop(e["addr"])["size"]
            else:
                total -= e["size"]
                unknown_freed += e["size"]
        if total > best:
            best, best_at = total, i
    # replay to the peak
    live = {}
    for e in trace[:best_at + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    print(f"  peak above base: {best} B at event {best_at} of {len(trace)}; base {base} B; "
          f"freed from before: {unknown_freed} B")
    print(f"  allocation that made the peak: {trace[best_at]['size']} B: {frame_text(trace[best_at]['frames'], 14)}")
    counted = sum(sizes.get(a, -(-e["size"] // 512) * 512) for a, e in live.items())
    print(f"  the same blocks as the allocator counts them: {counted} B "
          f"({sum(1 for a in live if a in sizes)} still allocated after the step, their size read; "
          f"the others rounded to 512 B)")
    extra = sorted(((sizes[a] - e["size"], e) for a, e in live.items() if a in sizes), key=lambda x: -x[0])
    for more, e in extra[:5]:
        print(f"    counted {more} B over the {e['size']} B asked: {frame_text(e['frames'], 3)}")
    groups = collections.defaultdict(lambda: [0, 0])
    for e in live.values():
        g = groups[frame_text(e["frames"], 4)]
        g[0] += e["size"]
        g[1] += 1
    print(f"  live at the peak ({sum(e['size'] for e in live.values())} B in {len(live)} blocks), by maker:")
    for text, (size, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:40]:
        print(f"    {size:>10} B {n:>4}x  {text}")


def trace(name, device):
    family = families.FAMILIES[name]("test", device=device)
    with cf.forward_context(family):
        profiled = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None, profile_repeats=1)
        smallest = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit="min", reuse_profile_of=profiled)
        limit = jitckpt.plan(smallest)["memory_limit"]
        model = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=limit, reuse_profile_of=profiled)
    info = jitckpt.plan(model)
    print(f"{name}: limit {limit} B, predicted {info['predicted_peak']} B, {info['num_stages']} stages", flush=True)
    for _ in range(2):
        cf.train(model, family, steps=1)
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=1000000, stacks="all")
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(2)
    with torch.jit.optimized_execution(False):
        with cf.forward_context(family):
            loss = cf.light_loss(model(*family.inputs))
        loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    print(f"  measured peak {peak} B: x{peak / limit:.4f} of the limit", flush=True)
    analyse(snapshot["device_traces"][torch.cuda.current_device()], base, block_sizes(snapshot))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="+")
    parser.add_argument("--autocast", choices=list(cf.AUTOCAST), default="none")
    args = parser.parse_args()
    cf.autocast_dtype = cf.AUTOCAST[args.autocast]
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True, warn_only=True)
    for name in args.names:
        try:
            trace(name, "cuda")
        except Exception as error:
            print(f"{name}: {type(error).__name__}: {error}", flush=True)


if __name__ == "__main__":
    main()
