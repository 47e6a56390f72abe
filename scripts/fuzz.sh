#!/usr/bin/env bash
# Long runs of the differential fuzzer: N random models from SEED (default 0), in shards of 100
# run side by side on every core, against the build in build/ (./scripts/test.sh makes it). Each
# failure is shrunk and saved in test/fuzz/regressions/, which the test suite replays; a summary
# per shard goes to build/fuzz/. Exits 1 if any model failed. JITCKPT_FUZZ_JOBS sets how many
# shards run at once (default: every core).
#   scripts/fuzz.sh 10000          # models 0..9999
#   scripts/fuzz.sh 2000 50000     # models 50000..51999
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:?usage: scripts/fuzz.sh N [SEED]}
first=${2:-0}
python=/usr/bin/python3
[ -x "$python" ] || python=python3
[ -d build/python/jitckpt ] || { echo "fuzz.sh: build/python is missing: run ./scripts/test.sh (or build) first"; exit 1; }
mkdir -p build/fuzz
shards=()
for ((start = first; start < first + count; start += 100)); do
  end=$((start + 100 < first + count ? start + 100 : first + count))
  shards+=("$start:$end")
done
run_shard() {
  PYTHONPATH=build/python PYTHONDONTWRITEBYTECODE=1 "$python" test/fuzz/fuzz.py --seeds "$1" \
    --shrink --save test/fuzz/regressions >"build/fuzz/models-${1/:/-}.log" 2>&1
}
export -f run_shard
export python
status=0
printf '%s\n' "${shards[@]}" | xargs -P "${JITCKPT_FUZZ_JOBS:-$(nproc)}" -I{} bash -c 'run_shard {}' || status=1
logs=()
for shard in "${shards[@]}"; do logs+=("build/fuzz/models-${shard/:/-}.log"); done
grep -h "^FAIL\|  shrunk\|  saved" "${logs[@]}" || true
# The shards' summaries added up: "exact 9412, fail 0, ..." over all models.
"$python" - "${logs[@]}" <<'PY'
import collections, re, sys
total, seconds, models, version = collections.Counter(), 0.0, 0, "?"
for path in sys.argv[1:]:
    for line in open(path):
        m = re.match(r"fuzz: models (\d+)\.\.(\d+), \d+ checks in (\d+) s .*torch ([^:]+): (.*)", line)
        if m:
            models += int(m[2]) - int(m[1]) + 1
            seconds += float(m[3])
            version = m[4]
            for part in m[5].split(", "):
                name, value = part.rsplit(" ", 1)
                total[name] += int(value)
print(f"fuzz.sh: {models} models, torch {version}, {seconds:.0f} s of shard time: "
      + ", ".join(f"{k} {v}" for k, v in sorted(total.items())))
PY
exit $status
