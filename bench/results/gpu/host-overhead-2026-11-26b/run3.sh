#!/usr/bin/env bash
# Run from the repository root on the GPU machine, with $OUT set: builds (scripts/bench.sh gpu,
# which runs scripts/cuda-test.sh), then bench/gpu_families.py (every family bit for bit at its
# smallest limit) and steps.py (ResNet-1001's step, plain against jitckpt).
start=$(date +%s)
export CXX=/usr/bin/g++
here=bench/results/gpu/host-overhead-2026-11-26b
timeout 170 bash -c "./scripts/bench.sh gpu --only NOTHING-MATCHES --out /tmp/none" > $OUT/build.log 2>&1; echo "build rc $? at $(( $(date +%s)-start ))s"
grep -E "FAIL|OK:" $OUT/build.log
timeout 80 env PYTHONPATH=build-cuda/python:bench python3 bench/gpu_families.py --out $OUT/families.json > $OUT/families.log 2>&1
echo "families rc $? at $(( $(date +%s)-start ))s"; tail -1 $OUT/families.log
timeout 80 env PYTHONPATH=build-cuda/python python3 $here/steps.py 2>&1 | grep -v "^jitckpt: " | tee $OUT/steps.log
echo "done at $(( $(date +%s)-start ))s"
