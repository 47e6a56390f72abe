#!/usr/bin/env bash
# The first thing to run on a lent GPU, whatever the issue: builds, runs the CUDA checks, then the
# GPU experiments in order of value, each bounded, the whole within --seconds (default 560: one
# device call of 600 s). Writes each step's command, log and results into OUT (default
# bench/results/gpu/suite-DATE), and steps.txt with each step's exit status and time; a step that
# fails or runs out of time does not stop the ones after it, and a step that would start with
# less than 30 s left is skipped. Exits 1 when any step failed.
#
#   scripts/gpu-suite.sh [--seconds S] [--from STEP] [--archive FILE] [OUT]
#                           on the GPU machine (builds with /usr/bin/g++, or JITCKPT_CXX: the
#                           machines' CXX and c++ link libstdc++ statically); --from STEP starts at that
#                           step (a second call, with the build kept, for what the first skipped);
#                           --archive FILE writes OUT, once done, as one .tgz (on a lent machine, into
#                           the folder the device tool brings back: it brings back only a few files)
#   scripts/gpu-suite.sh --dry-run [--archive FILE] [OUT]
#                           here: the same steps on the CPU, with build/ (built by scripts/test.sh;
#                           JITCKPT_BUILD_DIR picks another), tiny sizes and one run each, so that a
#                           mistake in a step shows here, not on a lent machine (ctest
#                           gpu_suite_dry_run)
#
# The steps, in order of value: build (scripts/bench.sh gpu-build: the build and the CUDA checks);
# families-bfloat16 (every model family bit for bit at its smallest limit under bfloat16 autocast,
# within it: test/cuda/check_families.py); families (float32); families-float16 (under float16
# autocast; not in the dry run: 1.13's CPU autocast has no float16); fuzz (the differential
# fuzzer's first seeds on the device, float32 and autocast to bfloat16 and float16:
# test/fuzz/fuzz.py --device); trace-densenet (where
# DenseNet-121's float32 step peaks at its smallest limit, block by block: test/cuda/trace_peak.py);
# host-overhead (jitckpt unconstrained against plain where the host bounds the step, with profiler
# tables: bench/host_overhead.py); user-story (a Llama in bfloat16 at a batch that runs out of
# memory without jitckpt, trained with memory_limit="auto", and the peers at that batch:
# bench/user_story.py); peers-bfloat16 (GPT against torch.compile's memory budgets and selective
# checkpointing at equal peak: bench/peers.py); host-overhead-bfloat16 (the same as host-overhead
# under bfloat16 autocast); transformers (bench/transformer_bench.py); peers (float32); paper-resnet
# (the paper's protocol on one ResNet: bench/models_bench.py).
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0 seconds=560 from="" archive=""
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --seconds) seconds=$2; shift ;;
    --from) from=$2; shift ;;
    --archive) archive=$2; shift ;;
    -*) echo "gpu-suite: unknown option $1"; exit 2 ;;
    *) break ;;
  esac
  shift
done
out=${1:-bench/results/gpu/suite-$(date +%F)}
mkdir -p "$out"
: >"$out/steps.txt"
started=$SECONDS
failed=0

# step NAME SECONDS COMMAND...: runs COMMAND bounded by SECONDS and by the time left, its output
# into NAME.log; before --from's step, or with under 30 s left, it is skipped.
step() {
  local name=$1 limit=$2 left=$((seconds - (SECONDS - started)))
  shift 2
  [ "$name" = "$from" ] && from=""
  if [ -n "$from" ] || [ "$left" -lt 30 ]; then
    echo "$name: skipped ($([ -n "$from" ] && echo "before --from" || echo "${left} s left"))" | tee -a "$out/steps.txt"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
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
  python=/usr/bin/python3 device=cpu seconds=100000
  export PYTHONPATH=$build/python
  families=(--cpu-block 512 gpt_mask_input unet) host=(--rounds 1 resnet18:32:2) traced=() fuzz=0:3
  story=(--capacity 4MiB --layers 2 --d 32 --heads 4 --kv-heads 2 --vocab 64 --sequence 32 --steps 2
    --memory-limit 0.5 --peers full --compile-budgets "")
  peers=(--models gpt --size test --rounds 1 --limits 0.5 --sac full --compile-budgets "")
  resnet=(--model resnet18 --image 32 --batch 2 --runs 1 --paired-rounds 1 --limits 2 --segment-counts 2)
  transformers=(--size small --steps 1 --run-steps 1)
else
  python=${PYTHON:-python3} device=cuda
  export CXX=${JITCKPT_CXX:-/usr/bin/g++} PYTHONPATH=$PWD/build-cuda/python
  families=() host=(--rounds 3 resnet1001:224:2 densenet121:500:8) traced=(densenet121) fuzz=0:40
  story=(--seconds 20 --peers full,ops-half --compile-budgets "")
  peers=(--models gpt --size large --rounds 2 --no-pair --limits 0.5 --sac full,ops-half --compile-budgets 0.3)
  resnet=(--model resnet101 --image 1000 --batch 2 --runs 3 --paired-rounds 3 --limits 4 --segment-counts 5
    --compile-budgets "")
  transformers=(--size large)
  step build 200 ./scripts/bench.sh gpu-build
fi

step families-bfloat16 80 "$python" test/cuda/check_families.py --device "$device" \
  --autocast bfloat16 --out "$out/families-bfloat16.json" "${families[@]}"
step families 80 "$python" test/cuda/check_families.py --device "$device" \
  --out "$out/families.json" "${families[@]}"
[ "$dry" = 1 ] || step families-float16 80 "$python" test/cuda/check_families.py --device "$device" \
  --autocast float16 --out "$out/families-float16.json" "${families[@]}"
step fuzz 90 "$python" test/fuzz/fuzz.py --device "$device" --seeds "$fuzz"
[ ${#traced[@]} -gt 0 ] && step trace-densenet 60 "$python" test/cuda/trace_peak.py "${traced[@]}"
step host-overhead 170 "$python" bench/host_overhead.py --device "$device" \
  --profile "$out/profile" "${host[@]}"
step user-story 150 "$python" bench/user_story.py --device "$device" "${story[@]}" \
  --out "$out/user-story.json"
step peers-bfloat16 150 "$python" bench/peers.py --device "$device" --autocast bfloat16 "${peers[@]}" \
  --out "$out/peers"
step host-overhead-bfloat16 120 "$python" bench/host_overhead.py --device "$device" \
  --autocast bfloat16 "${host[@]}"
step transformers 60 "$python" bench/transformer_bench.py --device "$device" \
  "${transformers[@]}" --out "$out/transformers.csv"
step peers 150 "$python" bench/peers.py --device "$device" "${peers[@]}" --out "$out/peers"
step paper-resnet 150 "$python" bench/models_bench.py "${resnet[@]}" --device "$device" \
  --min-seconds 0.2 --pair sequential --out "$out"

echo "gpu-suite: done in $((SECONDS - started)) s; results in $out"
if [ -n "$archive" ]; then
  tar czf "$archive" -C "$(dirname "$out")" "$(basename "$out")" || failed=1
  echo "gpu-suite: archived as $archive"
fi
exit "$failed"
