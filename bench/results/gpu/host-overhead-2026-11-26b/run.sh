#!/usr/bin/env bash
# Run from the repository root on the GPU machine, with $OUT set: builds (scripts/bench.sh gpu,
# which runs scripts/cuda-test.sh), runs probe.py and samples its two loops with perf.
start=$(date +%s)
export CXX=/usr/bin/g++
here=bench/results/gpu/host-overhead-2026-11-26b
timeout 200 bash -c "./scripts/bench.sh gpu --only NOTHING-MATCHES --out /tmp/none" > $OUT/build.log 2>&1; echo "build rc $? at $(( $(date +%s)-start ))s"
grep -E "FAIL|OK:" $OUT/build.log
which perf gdb py-spy; cat /proc/sys/kernel/perf_event_paranoid
rm -f /tmp/ready-*
PYTHONPATH=build-cuda/python python3 $here/probe.py > $OUT/probe.log 2>&1 &
pid=$!
for k in jitckpt plain; do
  while [ ! -f /tmp/ready-$k ] && kill -0 $pid 2>/dev/null; do sleep 0.5; done
  timeout 30 perf record -F 999 -g -p $pid -o /tmp/perf-$k.data -- sleep 11 > /dev/null 2>&1; echo "perf $k rc $?"
done
wait $pid; echo "probe rc $? at $(( $(date +%s)-start ))s"; cat $OUT/probe.log | grep -v "^jitckpt:"
for k in jitckpt plain; do
  perf report -i /tmp/perf-$k.data --no-children -g none --sort dso 2>/dev/null | grep -v "^#" | grep -v "^$" | head -15 > $OUT/perf-$k.txt
  perf report -i /tmp/perf-$k.data --no-children -g none --sort dso,sym 2>/dev/null | grep -v "^#" | grep -v "^$" | head -120 >> $OUT/perf-$k.txt
  perf report -i /tmp/perf-$k.data --children -g none --sort sym 2>/dev/null | grep -v "^#" | grep -v "^$" | head -120 > $OUT/perf-children-$k.txt
done
head -40 $OUT/perf-jitckpt.txt | cut -c1-150
echo "done at $(( $(date +%s)-start ))s"
