"""The differential fuzzer's driver: random models (generate.py) against their unmodified twins
(differential.py), each under a few random configurations. Prints one line per failure and a
summary by outcome and configuration; exits 1 if any model failed. A failing model shrinks to the
smallest variant that still fails, written to regressions/ (--save), which --regressions replays.

  fuzz.py --seeds 0:300               models 0..299, two configurations each
  fuzz.py --seeds 0:10000 --shrink --save test/fuzz/regressions
  fuzz.py --regressions test/fuzz/regressions
  fuzz.py --seeds 0:300 --peak-slack 1.0:64   step peaks at most 64 bytes over the limit
  fuzz.py --seeds 0:100 --device cuda         on a GPU, autocast to bfloat16 and float16
  fuzz.py --seeds 0:100 --batches 8,2,6,4,3,5,7,10   batches of varying size, some planned from predictions
  fuzz.py --seeds 0:100 --lengths 16,4,12,8,6,10,14,20   sequences of varying length, the same way
"""
import argparse
import collections
import dataclasses
import glob
import json
import os
import random
import sys
import tempfile
import time
import traceback
from typing import List

import torch

import jitckpt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import differential  # noqa: E402
import generate  # noqa: E402


def run_case(spec, config, directory) -> differential.Outcome:
    try:
        return differential.check(spec, config, directory)
    except Exception:  # the generator's or the harness's own failure: reported, never skipped
        return differential.Outcome("fail", "the check itself raised:\n" + traceback.format_exc()[-3000:])


def shrunk(spec, config, directory):
    """The smallest variant of `spec` that still fails under `config` (greedy, first variant that
    fails wins), and its outcome."""
    outcome = run_case(spec, config, directory)
    progress = True
    while progress:
        progress = False
        for candidate in generate.shrink(spec):
            result = run_case(candidate, config, directory)
            if result.status == "fail":
                spec, outcome, progress = candidate, result, True
                break
    return spec, outcome


def describe(config: differential.Config) -> str:
    return (f"limit={config.limit} {'deferred' if config.deferred else 'example-inputs'} "
            f"{config.autocast_dtype + '-autocast' if config.autocast else 'float32'} strategy={config.strategy} cuts={config.cuts} seed={config.seed}"
            + (f" {config.varies}s={','.join(map(str, config.sizes))}" if config.sizes else ""))


def fuzz(args) -> int:
    first, last = (int(x) for x in args.seeds.split(":"))
    counts = collections.Counter()
    by_dimension = collections.Counter()
    skips = collections.Counter()
    stages = []
    failures = predicted = 0
    start = time.time()
    with tempfile.TemporaryDirectory() as directory:
        for seed in range(first, last):
            spec = generate.draw(seed)
            if args.lengths and (spec["kind"] not in ("tokens", "seq") or spec.get("pos") == "param"):
                continue  # no sequence to shorten, or a position table as long as the model's
            rng = random.Random(seed * 7919 + 17)
            for _ in range(args.configs):
                config = differential.draw_config(rng)
                config.peak_slack = args.peak_slack
                config.sizes, config.varies = args.batches or args.lengths, "length" if args.lengths else "batch"
                outcome = run_case(spec, config, directory)
                counts[outcome.status] += 1
                predicted += outcome.predicted
                for dimension in (f"limit={config.limit}", f"deferred={config.deferred}",
                                  f"autocast={config.autocast_dtype if config.autocast else False}", f"strategy={config.strategy}",
                                  f"cuts={config.cuts}"):
                    by_dimension[(dimension, outcome.status)] += 1
                if outcome.stages:
                    stages.append(outcome.stages)
                if outcome.status in ("refused", "unsupported", "nondeterministic", "shared-cast"):
                    skips[(outcome.status, outcome.detail[:90])] += 1
                if outcome.status != "fail":
                    continue
                failures += 1
                print(f"FAIL model {seed} ({generate.summary(spec)}), {describe(config)}: {outcome.detail}", flush=True)
                if args.shrink:
                    small, small_outcome = shrunk(spec, config, directory)
                    print(f"  shrunk to {generate.summary(small)}: {small_outcome.detail}", flush=True)
                    if args.save:
                        os.makedirs(args.save, exist_ok=True)
                        path = os.path.join(args.save, f"model-{seed}-{config.seed}.json")
                        with open(path, "w") as f:
                            json.dump({"spec": small, "config": dataclasses.asdict(config),
                                       "found": small_outcome.detail[:500]}, f, indent=1, sort_keys=True)
                        print(f"  saved {path}", flush=True)
    seconds = time.time() - start
    checked = sum(counts.values())
    print(f"fuzz: models {first}..{last - 1}, {checked} checks in {seconds:.0f} s "
          f"({seconds / max(1, last - first):.2f} s a model), torch {torch.__version__}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for dimension in sorted({d for d, _ in by_dimension}):
        print(f"  {dimension}: " + ", ".join(f"{s} {by_dimension[(dimension, s)]}"
                                               for s in sorted(counts) if by_dimension[(dimension, s)]))
    if args.batches or args.lengths:
        print(f"  plans from predicted costs: {predicted} (of sizes {(args.batches or args.lengths)[4:]}, "
              "after four profiled)")
    if stages:
        stages.sort()
        print(f"  stages per model: min {stages[0]}, median {stages[len(stages) // 2]}, max {stages[-1]}; "
              f"one stage: {sum(1 for s in stages if s == 1)}")
    for (status, detail), n in skips.most_common(8):
        print(f"  {status} x{n}: {detail}")
    exact_needed = checked * args.min_exact
    if counts["exact"] < exact_needed:
        print(f"fuzz: only {counts['exact']} of {checked} checks compared bit for bit (at least "
              f"{args.min_exact:.0%} must be)")
        return 1
    if (args.batches or args.lengths) and predicted < counts["exact"]:  # else the sizes test little
        print(f"fuzz: only {predicted} plans from predicted costs in {counts['exact']} exact checks (at least "
              "one a check must be)")
        return 1
    return 1 if failures else 0


def replay(args) -> int:
    paths = sorted(glob.glob(os.path.join(args.regressions, "*.json")))
    failures = skipped = 0
    with tempfile.TemporaryDirectory() as directory:
        for path in paths:
            with open(path) as f:
                case = json.load(f)
            config = differential.Config(**case["config"])
            if config.autocast and not differential.autocast_on_this_device(config.autocast_dtype):
                print(f"skip {os.path.basename(path)}: autocast to {config.autocast_dtype} is not "
                      f"taken on this {differential.DEVICE} (PyTorch {torch.__version__})", flush=True)
                skipped += 1
                continue
            outcome = run_case(case["spec"], config, directory)
            ok = outcome.status == "exact"
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(path)}: {outcome.status} {outcome.detail}", flush=True)
    print(f"fuzz: {len(paths)} regressions, {failures} failed, {skipped} skipped")
    return 1 if failures else 0


SKIPPED = 77  # ctest's SKIP_RETURN_CODE


def peak_slack(text: str):
    factor, extra = text.split(":")
    return float(factor), int(extra)


def sizes_of(text: str) -> List[int]:
    sizes = [int(x) for x in text.split(",")]
    if len(sizes) % differential.MICRO_BATCHES or min(sizes) < 2:
        raise argparse.ArgumentTypeError(f"{differential.MICRO_BATCHES} micro-batches a step, of sizes of at "
                                         "least 2 (batch norm)")
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0:300", help="models FIRST:LAST (LAST excluded)")
    parser.add_argument("--configs", type=int, default=2, help="configurations drawn per model")
    parser.add_argument("--shrink", action="store_true", help="shrink each failing model")
    parser.add_argument("--save", help="folder for the shrunk failures (with --shrink)")
    parser.add_argument("--regressions", help="replay the cases saved in this folder instead")
    parser.add_argument("--min-exact", type=float, default=0.5,
                        help="fraction of checks that must compare bit for bit (not skipped as "
                             "nondeterministic, unsupported or refused)")
    parser.add_argument("--peak-slack", type=peak_slack, metavar="FACTOR:BYTES",
                        help="how far a step peak may pass the limit (default: differential.PEAK_SLACK)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where models train (cuda: deterministic algorithms asked for)")
    parser.add_argument("--front-end", choices=["script", "export"], default="script",
                        help="export: the eager models through torch.export (PyTorch 2.6 on), against eager")
    varying = parser.add_mutually_exclusive_group()
    varying.add_argument("--batches", type=sizes_of, metavar="N,N,...",
                         help="each micro-batch's size, in order: 8,2,6,4,3,5,7,10 profiles four sizes, then "
                              "plans the others from predicted costs (default: the model's own, 4 micro-batches)")
    varying.add_argument("--lengths", type=sizes_of, metavar="N,N,...",
                         help="each micro-batch's sequence length, in order, as --batches (sequence models only)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: ctest runs shards side by side)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    # oneDNN's convolution gradients differ from run to run on 2.6 (one model in three, measured):
    # the unmodified model would be nondeterministic, or look deterministic twice and then not.
    torch.backends.mkldnn.enabled = False
    differential.DEVICE = args.device
    differential.FRONT_END = args.front_end
    if args.front_end == "export" and not jitckpt.export.available():
        print(f"fuzz: --front-end export needs torch.export's training capture (PyTorch 2.6 on), not {torch.__version__}")
        return SKIPPED
    if args.device == "cuda":  # so that most references repeat themselves (atomics otherwise)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    return replay(args) if args.regressions else fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
