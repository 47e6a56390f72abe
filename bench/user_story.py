"""The user's story on a GPU: a Llama-style decoder trained in bfloat16 autocast with AdamW at a
batch that runs out of memory without jitckpt, then with jitckpt.checkpoint(model, memory_limit=
"auto") (no example inputs: it plans at the first training call), then with the peers at the same
batch, each for as many steps as fit in its time.

    PYTHONPATH=build-cuda/python python3 bench/user_story.py --out bench/results/gpu/user-story.json
    PYTHONPATH=build/python /usr/bin/python3 bench/user_story.py --device cpu --capacity 4MiB \
        --layers 2 --d 32 --heads 4 --kv-heads 2 --vocab 64 --sequence 32 --steps 2 \
        --memory-limit 0.5 --peers full --out /tmp/user-story.json   # dry run

1. The batch: the eager step's measured peak at batch 1 (and 2, for what a sample adds), and the
   batch that needs --oversize times the device's free memory (--capacity on the CPU, which never
   runs out: there a peak above it counts as running out).
2. Eager at that batch, one step: expected to run out of memory.
3. jitckpt at --memory-limit (default "auto"): --steps steps or --seconds, whichever ends first;
   tokens per second over the steps after the first (which profiles and plans), and the peak.
4. Each peer at the same batch (bench/peer_methods.py: sac policies, then compile budgets): one step
   (out of memory, or not), then timed steps as jitckpt's. The best peer is the fastest that fits.
"""
import argparse
import json
import math
import os
import platform
import sys
import time
import warnings
from typing import Callable, Dict

import torch
import torch.nn.functional as F

import jitckpt
import peer_methods
import records
from common import is_out_of_memory, release_memory, synchronize, use_threads
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models"))  # the model zoo
import families


def parse_bytes(text: str) -> int:
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * scale)
    return int(text)


class Story:
    def __init__(self, args: argparse.Namespace):
        self.args, self.device = args, args.device
        self.result: Dict = {"settings": {k: v for k, v in vars(args).items() if k != "out"}, "runs": {}}

    def eager(self) -> torch.nn.Module:
        a = self.args
        torch.manual_seed(0)
        return families.Llama(a.vocab, a.d, a.heads, a.kv_heads, a.layers).to(self.device).train()

    def batch_of(self, batch: int):
        g = torch.Generator().manual_seed(batch)
        tokens = torch.randint(0, self.args.vocab, (batch, self.args.sequence + 1), generator=g).to(self.device)
        return tokens[:, :-1], tokens[:, 1:]

    def training_step(self, model: torch.nn.Module, batch: int) -> Callable[[], None]:
        """One AdamW step in bfloat16 autocast, gradients set to None after it (zero_grad's default)."""
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        idx, targets = self.batch_of(batch)
        device_type = self.device.split(":")[0]

        def step() -> None:
            with torch.autocast(device_type, dtype=torch.bfloat16):
                logits = model(idx)
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return step

    def peak_of(self, step: Callable[[], None]) -> int:
        """Peak bytes held during one step (weights and optimizer state included)."""
        if self.device.startswith("cuda"):
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats()
            step()
            synchronize(self.device)
            return torch.cuda.max_memory_allocated()
        with jitckpt.cpu_memory() as memory:
            step()
        return memory.peak

    def capacity(self) -> int:
        if self.device.startswith("cuda"):
            return torch.cuda.mem_get_info()[0] + torch.cuda.memory_allocated()
        return parse_bytes(self.args.capacity)

    def choose_batch(self) -> int:
        peaks = []
        for batch in (1, 2):
            model = self.eager()
            step = self.training_step(model, batch)
            step()
            peaks.append(self.peak_of(step))
            del model, step
            release_memory(self.device)
        per_sample = max(1, peaks[1] - peaks[0])
        batch = max(2, math.ceil((self.args.oversize * self.capacity() - (peaks[0] - per_sample)) / per_sample))
        self.result.update({"capacity": self.capacity(), "peak_batch1": peaks[0], "peak_per_sample": per_sample,
                            "batch": batch, "tokens_per_step": batch * self.args.sequence})
        print(f"capacity {self.capacity() / 2**20:.1f} MiB; eager peak {peaks[0] / 2**20:.1f} MiB at batch 1, "
              f"{per_sample / 2**20:.1f} MiB a sample more: batch {batch}", flush=True)
        return batch

    def train(self, name: str, make: Callable[[], torch.nn.Module], batch: int, steps: int) -> Dict:
        """First step, then timed steps until `steps` or --seconds; out of memory is recorded."""
        run: Dict = {"status": "ok"}
        step = None
        try:
            model = make()
            step = self.training_step(model, batch)
            start = time.perf_counter()
            run["first_peak"] = self.peak_of(step)
            run["first_step_s"] = time.perf_counter() - start
            done, start = 0, time.perf_counter()
            while done < steps - 1 and time.perf_counter() - start < self.args.seconds:
                step()
                done += 1
            synchronize(self.device)
            elapsed = time.perf_counter() - start
            run["peak"] = self.peak_of(step)
            run.update({"steps": done + 2, "tokens_per_s": done * batch * self.args.sequence / elapsed if done else None})
            if not self.device.startswith("cuda") and run["peak"] > self.capacity():
                run["status"] = "over capacity"  # the CPU never runs out: the peak says what a GPU would do
        except RuntimeError as error:
            if not is_out_of_memory(error):
                raise
            run = {"status": "oom", "note": str(error).splitlines()[0][:160]}
        step = model = None
        release_memory(self.device)
        self.result["runs"][name] = run
        print(f"{name:16s} {json.dumps(run)}", flush=True)
        return run

    def run(self) -> None:
        a = self.args
        batch = self.choose_batch()
        self.train("eager", self.eager, batch, 1)
        limit = a.memory_limit if a.memory_limit in ("auto", "min") else float(a.memory_limit)
        self.train("jitckpt", lambda: jitckpt.checkpoint(self.eager(), memory_limit=limit), batch, a.steps)
        for method, parameter, make in peer_methods.peers(self.eager, a.compile_budgets, a.peers):
            if make is not None:
                self.train(f"{method} {parameter}", make, batch, a.steps)
        fits = {name: r for name, r in self.result["runs"].items() if r["status"] == "ok" and r.get("tokens_per_s")}
        peers = {name: r for name, r in fits.items() if name not in ("eager", "jitckpt")}
        best = max(peers, key=lambda n: peers[n]["tokens_per_s"], default=None)
        self.result["best_peer"] = best
        if best and "jitckpt" in fits:
            self.result["jitckpt_over_best_peer"] = fits["jitckpt"]["tokens_per_s"] / peers[best]["tokens_per_s"]
        print(f"best peer that fits: {best}; jitckpt / best peer throughput: "
              f"{self.result.get('jitckpt_over_best_peer')}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--sequence", type=int, default=2048)
    parser.add_argument("--oversize", type=float, default=1.3, help="eager's peak at the batch, x capacity")
    parser.add_argument("--capacity", default="0", help="bytes the CPU counts as the device's (CPU only)")
    parser.add_argument("--memory-limit", default="auto", help='jitckpt\'s limit: "auto", "min" or a fraction')
    parser.add_argument("--steps", type=int, default=300, help="training steps per method at most")
    parser.add_argument("--seconds", type=float, default=40, help="timed seconds per method at most")
    parser.add_argument("--peers", default="full,every2,ops-half", help="selective checkpointing policies")
    parser.add_argument("--compile-budgets", default="0.1", help="torch.compile memory budgets")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this PyTorch sees no CUDA device")
    warnings.filterwarnings("ignore", category=UserWarning)
    use_threads(args.threads)
    story = Story(args)
    story.result["settings"].update({"torch": torch.__version__, "machine": platform.node(),
                                     "command": "bench/user_story.py " + " ".join(sys.argv[1:])})
    if args.device.startswith("cuda"):
        story.result["settings"]["gpu"] = torch.cuda.get_device_name()
    story.run()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        records.dump(story.result, f)


if __name__ == "__main__":
    main()
