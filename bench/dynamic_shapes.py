"""Training on batches of varying length, as fine-tuning with dynamic padding does: a Llama-style
decoder (d 256, 8 heads, 6 blocks, vocabulary 512; test/models/families.py, size "bench"),
scripted, rewritten without example inputs, and trained with AdamW and clipping beside the
unmodified model, step by step on the same batches (--front-end export: the eager model through
torch.export, beside the eager model; --family: another language model of the zoo at its "bench"
size, such as lstm_stack or gru). Each step's gradients are compared bit for bit, its measured
peak against the limit of the plan it ran, and both steps are timed.

    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=build/python:bench /usr/bin/python3 bench/dynamic_shapes.py \\
        --limit 0.7 --rounds 3 --out bench/results/cpu/dynamic-shapes/jitckpt-0.7.json

OMP_WAIT_POLICY=PASSIVE: Debian's PyTorch runs matrix products in OpenBLAS's own threads beside
its OpenMP threads, which spin while they wait; on two cores the two pools take turns, and a
plain step of this model takes twice as long and spreads by 2x from step to step (measured in
docs/benchmarks.md). Passive OpenMP threads leave the cores to OpenBLAS. Both models run alike.

Both models run outside TorchScript's optimizing executor, as the tests do: after its profiling
runs it differentiates the plain model through its own graphs, whose gradients differ from the
model's in the last bits (--optimized-execution turns it on for both).

Loops: "lengths", --steps batches of --batch sequences whose length is drawn from 64..256 in
steps of 16 (every length once, then drawn again), and "epoch", batches of one length whose last
batch is smaller. Summary: total time against plain, the first step of a new shape in plain
steps, the steps at a shape seen before, and the largest peak over its limit. With --rounds, each
loop runs again with fresh models on the same batches, and the summary gives each figure's median
over the rounds (one step's time spreads by up to 2x on a shared machine).
"""
import argparse
import os
import platform
import random
import statistics
import sys
import time
from typing import Dict, List

import torch
import torch.nn.functional as F

import jitckpt
import records
from common import threading_environment, use_threads

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))
import families  # noqa: E402

LENGTHS = list(range(64, 257, 16))
LANGUAGE_MODELS = ["llama", "lstm_stack", "gru"]  # token ids in, logits over the vocabulary out


def batches(loop: str, steps: int, batch: int, seed: int) -> List[torch.Size]:
    draw = random.Random(seed)
    if loop == "lengths":
        lengths = LENGTHS[:]
        draw.shuffle(lengths)
        lengths += [draw.choice(LENGTHS) for _ in range(max(0, steps - len(lengths)))]
        return [torch.Size([batch, t]) for t in lengths[:steps]]
    return [torch.Size([batch, 128])] * (steps - 1) + [torch.Size([max(1, batch // 4), 128])]


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


class Trainer:
    """A model, its AdamW, and one step: zero_grad, forward, loss, backward, clipping, step."""

    def __init__(self, model: torch.jit.ScriptModule, optimized_execution: bool):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        self.optimized_execution = optimized_execution

    def step(self, tokens: torch.Tensor, targets: torch.Tensor, seed: int) -> Dict:
        self.optimizer.zero_grad(set_to_none=True)
        torch.manual_seed(seed)  # the same dropout masks in both models
        start = time.perf_counter()
        with jitckpt.cpu_memory() as memory, torch.jit.optimized_execution(self.optimized_execution):
            loss_fn(self.model(tokens), targets).backward()
        seconds = time.perf_counter() - start
        grads = [p.grad.clone() for p in self.model.parameters()]
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return {"seconds": seconds, "peak": memory.peak, "grads": grads}


def plan_for(model: torch.jit.ScriptModule, shape: torch.Size) -> Dict:
    """The plan made for batches of `shape` (the chain's input is the embedded batch x length x d)."""
    info = jitckpt.plan(model)
    for variant in [info] + info["variants"]:
        if variant["input_shapes"][0][:2] == list(shape):
            return variant
    raise AssertionError(f"no plan for {list(shape)}")


def run(args: argparse.Namespace, loop: str) -> Dict:
    family = families.FAMILIES[args.family]("bench")
    vocab = family.eager(0).embed.weight.shape[0]
    export = args.front_end == "export"  # the eager model, as jitckpt takes it and as the reference
    plain = Trainer(family.eager(0) if export else family.make(0), args.optimized_execution)
    rewritten = Trainer(jitckpt.checkpoint(family.eager(0) if export else family.make(0), memory_limit=args.limit,
                                           front_end=args.front_end), args.optimized_execution)
    seen, rows = set(), []
    generator = torch.Generator().manual_seed(args.seed)
    for i, shape in enumerate(batches(loop, args.steps, args.batch, args.seed)):
        tokens = torch.randint(0, vocab, shape, generator=generator)
        targets = torch.randint(0, vocab, shape, generator=generator)
        a = plain.step(tokens, targets, i)
        try:
            b = rewritten.step(tokens, targets, i)
        except RuntimeError as error:  # what a user's run would stop with
            print(f"{loop} step {i:2d} {list(shape)}: {error}", flush=True)
            return {"loop": loop, "rows": rows, "error": {"step": i, "shape": list(shape), "message": str(error)},
                    "summary": summarize(rows)}
        info = plan_for(rewritten.model, shape)
        held = families.caller_held_bytes(rewritten.model.rewritten if export else rewritten.model, (tokens,))
        logits = torch.zeros(*shape, vocab)  # the output's size: what the loss holds beside it
        loss_bytes = families.loss_held_bytes(logits, lambda o: loss_fn(o, targets))
        row = {"step": i, "shape": list(shape), "new_shape": tuple(shape) not in seen,
               "plain_ms": a["seconds"] * 1e3, "jitckpt_ms": b["seconds"] * 1e3,
               "exact": all(torch.equal(x, y) for x, y in zip(a["grads"], b["grads"])),
               "peak": b["peak"] + held, "limit": info["memory_limit"], "over_limit": info.get("over_limit", False),
               "loss_bytes": loss_bytes}
        row["within"] = row["peak"] <= row["limit"] + loss_bytes + families.OUTSIDE_CHAIN_BYTES
        seen.add(tuple(shape))
        rows.append(row)
        print(f"{loop} step {i:2d} {str(list(shape)):10s} {'new ' if row['new_shape'] else 'seen'} "
              f"plain {row['plain_ms']:8.1f} ms  jitckpt {row['jitckpt_ms']:8.1f} ms  "
              f"{'EXACT' if row['exact'] else 'DIFF '}  peak/limit {row['peak'] / row['limit']:.3f}"
              f"{' (over_limit: its smallest)' if row['over_limit'] else ''}", flush=True)
    return {"loop": loop, "rows": rows, "summary": summarize(rows)}


def summarize(rows: List[Dict]) -> Dict:
    if not rows:  # the first step stopped
        return {"steps": 0, "shapes": 0}
    plain = sum(r["plain_ms"] for r in rows)
    first = [r for r in rows if r["new_shape"]]
    later = [r for r in rows if not r["new_shape"]]
    # A plain step's time spreads widely on a shared machine: each new shape's first step against
    # the median plain step of that shape over the loop as well.
    median_plain = {tuple(r["shape"]): statistics.median(q["plain_ms"] for q in rows if q["shape"] == r["shape"])
                    for r in first}
    in_median = [r["jitckpt_ms"] / median_plain[tuple(r["shape"])] for r in first]
    return {"steps": len(rows), "shapes": len(first), "total_time_ratio": sum(r["jitckpt_ms"] for r in rows) / plain,
            "first_steps_in_median_plain_steps": in_median,
            "later_first_steps_within_two": sum(x <= 2 for x in in_median[1:]),
            "first_step_in_plain_steps": statistics.median(r["jitckpt_ms"] / r["plain_ms"] for r in first),
            "first_step_in_plain_steps_max": max(r["jitckpt_ms"] / r["plain_ms"] for r in first),
            "seen_shape_time_ratio": statistics.median(r["jitckpt_ms"] / r["plain_ms"] for r in later) if later else None,
            "exact": sum(r["exact"] for r in rows), "within_limit": sum(r["within"] for r in rows),
            "largest_peak_over_limit": max(r["peak"] / r["limit"] for r in rows)}


def over_rounds(rounds: List[Dict]) -> Dict:
    """A loop run several times: each round's summary, and the medians across rounds (per new shape
    for its first step against that round's median plain step of the shape)."""
    summaries = [r["summary"] for r in rounds]
    seen = [s["seen_shape_time_ratio"] for s in summaries if s["seen_shape_time_ratio"] is not None]
    per_shape = [statistics.median(s["first_steps_in_median_plain_steps"][k] for s in summaries)
                 for k in range(min(len(s["first_steps_in_median_plain_steps"]) for s in summaries))]
    return {"loop": rounds[0]["loop"], "rounds": rounds,
            "summary": {"rounds": len(rounds), "steps": sum(s["steps"] for s in summaries), "shapes": summaries[0]["shapes"],
                        "total_time_ratio": statistics.median(s["total_time_ratio"] for s in summaries),
                        "total_time_ratios": [s["total_time_ratio"] for s in summaries],
                        "first_steps_in_median_plain_steps": per_shape,
                        "later_first_steps_within_two": sum(x <= 2 for x in per_shape[1:]),
                        "first_step_in_plain_steps": statistics.median(s["first_step_in_plain_steps"]
                                                                       for s in summaries),
                        "first_step_in_plain_steps_max": max(s["first_step_in_plain_steps_max"] for s in summaries),
                        "seen_shape_time_ratio": statistics.median(seen) if seen else None,
                        "exact": sum(s["exact"] for s in summaries),
                        "within_limit": sum(s["within_limit"] for s in summaries),
                        "largest_peak_over_limit": max(s["largest_peak_over_limit"] for s in summaries)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", default="0.7", help='memory_limit: a fraction, bytes, "min" or "auto"')
    parser.add_argument("--loops", default="lengths,epoch")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1, help="runs of each loop, fresh models on the same batches")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--optimized-execution", action="store_true")
    parser.add_argument("--front-end", default="script", choices=["script", "export"],
                        help="export: the eager model through torch.export (2.6 on), against the eager model")
    parser.add_argument("--family", default="llama", choices=LANGUAGE_MODELS,
                        help="the model: a language model of test/models/families.py, at its bench size")
    parser.add_argument("--out")
    args = parser.parse_args()
    args.limit = float(args.limit) if args.limit.replace(".", "", 1).isdigit() else args.limit
    threads = use_threads(args.threads)
    results = []
    for loop in args.loops.split(","):
        rounds = [run(args, loop) for _ in range(args.rounds)]
        results.append(rounds[0] if args.rounds == 1 else over_rounds(rounds))
    for r in results:
        s = r["summary"]
        if args.rounds > 1:
            print(f"{r['loop']}: medians over {args.rounds} rounds (total in each: "
                  f"{', '.join(f'x{x:.3f}' for x in s['total_time_ratios'])}); steps, exact and within "
                  f"counted over all rounds")
        if "error" in r or any("error" in q for q in r.get("rounds", [])):
            error = r.get("error") or next(q["error"] for q in r["rounds"] if "error" in q)
            print(f"{r['loop']}: stopped at step {error['step']} ({error['shape']})")
        if not s["steps"]:
            continue
        print(f"{r['loop']}: {s['steps']} steps, {s['shapes']} shapes: total x{s['total_time_ratio']:.3f} of plain; "
              f"a new shape's first step {s['first_step_in_plain_steps']:.1f} plain steps (median; max "
              f"{s['first_step_in_plain_steps_max']:.1f}); against the shape's median plain step, "
              f"{s['later_first_steps_within_two']} of {s['shapes'] - 1} after the first within two "
              f"({', '.join(f'{x:.1f}' for x in s['first_steps_in_median_plain_steps'])}); "
              f"seen shapes {'none' if s['seen_shape_time_ratio'] is None else 'x' + format(s['seen_shape_time_ratio'], '.3f')}; "
              f"{s['exact']} exact, {s['within_limit']} within the limit (largest peak/limit "
              f"{s['largest_peak_over_limit']:.3f})")
    if args.out:
        with open(args.out, "w") as f:
            records.dump({"command": "bench/dynamic_shapes.py " + " ".join(sys.argv[1:]), "torch": torch.__version__,
                          "threads": threads, "machine": platform.machine(),
                          "environment": threading_environment(),
                          "results": results}, f)


if __name__ == "__main__":
    main()
