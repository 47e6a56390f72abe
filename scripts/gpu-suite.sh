#!/usr/bin/env bash
# The first thing to run on a lent GPU, whatever the issue: builds, runs the CUDA checks, then the
# GPU experiments in order of value, each bounded, the whole within about 10 minutes. Writes each
# step's command, log and results into OUT (default bench/results/gpu/suite-DATE), and steps.txt
# with each step's exit status and time; a step that fails or runs out of time does not stop the
# ones after it. Exits 1 when any step failed.
#
#   scripts/gpu-suite.sh [OUT]             on the GPU machine (CXX defaults to /usr/bin/g++: the
#                                          machines' default c++ links libstdc++ statically)
#   scripts/gpu-suite.sh --dry-run [OUT]   here: the same steps on the CPU, with build/ (built by
#                                          scripts/test.sh; JITCKPT_BUILD_DIR picks another), tiny
#                                          sizes and one run each, so that a mistake in a step shows
#                                          here, not on a lent machine (ctest gpu_suite_dry_run)
#
# The steps: 1. build and CUDA checks (scripts/bench.sh gpu-build); 2. every model family bit for
# bit at its smallest limit, within it (test/cuda/check_families.py); 3. the same under bfloat16
# autocast; 4. jitckpt unconstrained against plain where the host bounds the step, with profiler
# tables (bench/host_overhead.py); 5. the paper's protocol on one ResNet with the peers,
# torch.compile's memory budgets 0.1 and 0.5 (bench/models_bench.py); 6. transformers at a GPU's
# size (bench/transformer_bench.py).
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0
if [ "${1:-}" = --dry-run ]; then
  dry=1
  shift
fi
out=${1:-bench/results/gpu/suite-$(date +%F)}
mkdir -p "$out"
: >"$out/steps.txt"
started=$SECONDS
failed=0

# step NAME SECONDS COMMAND...: runs COMMAND bounded by SECONDS, its output into NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  printf '%q ' "$@" >"$out/$name.command"
  echo >>"$out/$name.command"
  local begun=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local status=$?
  [ "$status" -eq 0 ] || failed=1
  echo "$name: exit $status after $((SECONDS - begun)) s (at $((SECONDS - started)) s)" |
    tee -a "$out/steps.txt"
}

if [ "$dry" = 1 ]; then
  build=$(cd "${JITCKPT_BUILD_DIR:-build}" 2>/dev/null && pwd)
  [ -d "$build/python/jitckpt" ] || { echo "gpu-suite: no jitckpt in ${JITCKPT_BUILD_DIR:-build}/python: build first"; exit 1; }
  python=/usr/bin/python3 device=cpu
  export PYTHONPATH=$build/python
  families=(gpt_mask_input unet) host=(--rounds 1 resnet18:32:2)
  resnet=(--model resnet18 --image 32 --batch 2 --runs 1 --paired-rounds 1 --limits 2 --segment-counts 2)
  transformers=(--size small --steps 1 --run-steps 1)
  budgets=""
else
  python=${PYTHON:-python3} device=cuda
  export CXX=${CXX:-/usr/bin/g++} PYTHONPATH=$PWD/build-cuda/python
  families=() host=(resnet1001:224:2 densenet121:500:8)
  resnet=(--model resnet101 --image 1000 --batch 2 --runs 3 --paired-rounds 3 --limits 4 --segment-counts 5)
  transformers=(--size large)
  budgets="0.1,0.5"
  step build 200 ./scripts/bench.sh gpu-build
fi

step families 80 "$python" test/cuda/check_families.py --device "$device" \
  --out "$out/families.json" "${families[@]}"
step families-bfloat16 80 "$python" test/cuda/check_families.py --device "$device" \
  --autocast bfloat16 --out "$out/families-bfloat16.json" "${families[@]}"
step host-overhead 90 "$python" bench/host_overhead.py --device "$device" \
  --profile "$out/profile" "${host[@]}"
# (An empty list of budgets runs no torch.compile: its compilations take minutes on the CPU.)
step paper-resnet 150 "$python" bench/models_bench.py "${resnet[@]}" --device "$device" \
  --min-seconds 0.2 --pair sequential --compile-budgets "$budgets" --out "$out"
step transformers 60 "$python" bench/transformer_bench.py --device "$device" \
  "${transformers[@]}" --out "$out/transformers.csv"

echo "gpu-suite: done in $((SECONDS - started)) s; results in $out"
exit "$failed"
