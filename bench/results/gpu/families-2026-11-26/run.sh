#!/usr/bin/env bash
# Run from the repository root on the GPU machine, with $OUT set (the device tool sets it):
# builds with scripts/bench.sh gpu (which runs scripts/cuda-test.sh), then bench/gpu_families.py
# over every family, then one host profile of ResNet-1001 (BufferRollback's time on the host).
start=$(date +%s)
export CXX=/usr/bin/g++
timeout 200 bash -c "./scripts/bench.sh gpu --only NOTHING-MATCHES --out /tmp/none" > $OUT/build.log 2>&1; echo "build rc $? at $(( $(date +%s)-start ))s"
grep -E "PASS|FAIL|OK:|failed|error" $OUT/build.log | cut -c1-200 | tail -30
timeout 200 env PYTHONPATH=build-cuda/python:bench python3 bench/gpu_families.py --out $OUT/families.json 2>&1 | tee $OUT/families.log | cut -c1-400
echo "families rc ${PIPESTATUS[0]} at $(( $(date +%s)-start ))s"
timeout 90 env PYTHONPATH=build-cuda/python python3 bench/results/gpu/host-profile-2026-11-26/run.py resnet1001:224:2 2>&1 | grep -v "^\s*$" | cut -c1-150 | grep -v "^jitckpt: profil\|^jitckpt: partit" > $OUT/host-profile.log
tail -8 $OUT/host-profile.log
echo "done at $(( $(date +%s)-start ))s"
