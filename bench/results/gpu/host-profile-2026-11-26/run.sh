#!/usr/bin/env bash
# Run from the repository root on the GPU machine, with $OUT set (the device tool sets it).
start=$(date +%s)
export CXX=/usr/bin/g++
timeout 150 bash -c "./scripts/bench.sh gpu --only NOTHING-MATCHES --out /tmp/none" > $OUT/build.log 2>&1; echo "build rc $? at $(( $(date +%s)-start ))s"
grep -E "PASS training|FAIL|OK:|failed" $OUT/build.log | cut -c1-200
timeout 330 env PYTHONPATH=build-cuda/python python3 bench/results/gpu/host-profile-2026-11-26/run.py resnet1001:224:2 densenet121:500:8 resnet101:1000:2 2>&1 | tee $OUT/gpu2.log | grep -v "^\s*$" | cut -c1-150 | grep -v "^jitckpt: profil\|^jitckpt: partit"
echo "gpu2 done at $(( $(date +%s)-start ))s"
cd $OUT && tar czf results.tgz *.txt *.log 2>/dev/null; ls $OUT
