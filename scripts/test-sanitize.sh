#!/usr/bin/env bash
# Builds the runtime, the passes, the planner and the Python bindings (jitckpt._C and the libraries
# it links, nothing else) with AddressSanitizer and UBSan in build-asan, and runs the Python
# exactness tests against them in Debian's /usr/bin/python3 (the one with torch) with ASan's
# runtime preloaded: test_checkpoint.py, test_layout_exactness.py, test_faults.py,
# test_autograd_contracts.py, autocast's casts (test_mixed_precision.py), tensors sized by data
# (test_sizes_from_data.py), then the differential fuzzer's first 20 models. Fails on any ASan or UBSan report, in the tests'
# subprocesses too. Arguments are further pytest arguments (more files, -k ...); run_python runs
# any other Python command the same way. About 2.5 minutes to build on 2 cores from nothing and
# 2.5 to test; prints both.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
build="build-asan"

# Only what the module needs, built fast: no tests, tools or benchmarks; -O1 with line tables only
# (file:line in the reports); unity batches of 8 files, which instantiate the torch headers'
# templates once per batch (a third of the CPU time of one object per file), and then no
# precompiled header (parsing torch/script.h once per batch costs less than precompiling it
# twice). Debug: no -O3 for the solver, no LTO in pybind11's module.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
  -DJITCKPT_SANITIZE=ON -DJITCKPT_BUILD_TESTS=OFF -DJITCKPT_BUILD_BENCH=OFF \
  -DJITCKPT_BUILD_TOOLS=OFF -DJITCKPT_BUILD_EXAMPLES=OFF -DJITCKPT_PCH=OFF \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 >/dev/null
cmake --build "$build" -j"$(nproc)" --target _C
built=$SECONDS

echo "test-sanitize.sh: built in $((built - start)) s"

# ASan's runtime, of the compiler that built the libraries, must come first in the process (Python
# itself is not instrumented), and libstdc++ with it: ASan resolves the real __cxa_throw when it
# starts, and without libstdc++ loaded by then (python3 does not link it) the first C++ exception
# fails a CHECK (google/sanitizers#934). libubsan comes in as a dependency of our libraries.
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
preload="$("$cxx" -print-file-name=libasan.so) $("$cxx" -print-file-name=libstdc++.so)"
logs=$PWD/$build/sanitizer-logs
asan_options=(
  # Reports to files, one per process, so that none is lost with a subprocess whose failure a test
  # expects or whose output it captures (UBSan ignores log_path here and writes to stderr).
  log_path="$logs/asan"
  # The interpreter's objects live until the process ends: LeakSanitizer would report them all.
  detect_leaks=0
)
ubsan_options=(print_stacktrace=1 halt_on_error=1)

# run_python ARGS...: /usr/bin/python3 ARGS under the sanitizers, with jitckpt from build-asan;
# exits the script when the command fails, when ASan wrote a report, or when UBSan wrote one
# ("FILE:LINE:COL: runtime error: ...") to its stderr, which is kept in $logs/stderr.
run_python() {
  local rc=0
  rm -rf "$logs" && mkdir -p "$logs"
  { LD_PRELOAD="$preload" ASAN_OPTIONS=$(IFS=:; echo "${asan_options[*]}") \
      UBSAN_OPTIONS=$(IFS=:; echo "${ubsan_options[*]}") \
      PYTHONPATH="$PWD/$build/python" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 "$@" \
      2>&1 1>&3 3>&- | tee "$logs/stderr" >&2; } 3>&1 || rc=$?
  if compgen -G "$logs/asan.*" >/dev/null; then
    cat "$logs"/asan.*
    echo "test-sanitize.sh: AddressSanitizer reported errors (above; in $logs) in: python3 $*"
    exit 1
  fi
  if grep -Eq ':[0-9]+:[0-9]+: runtime error: ' "$logs/stderr"; then
    echo "test-sanitize.sh: UBSan reported errors (above; in $logs/stderr) in: python3 $*"
    exit 1
  fi
  if [ "$rc" != 0 ]; then
    echo "test-sanitize.sh: python3 $* failed ($rc)"
    exit "$rc"
  fi
}

# The exactness tests: every strategy and limit form, replanning, save and load in a fresh process
# (test_checkpoint); boundaries with strided layouts and shared parameters (test_layout_exactness);
# allocation failures at every point of a step, two threads (test_faults); autograd.grad, hooks,
# retain_graph (test_autograd_contracts); autocast's casts kept to a stage, a weight several stages
# cast (test_mixed_precision); a call whose data makes larger tensors than its plan's, run again
# on a new plan or refused (test_sizes_from_data). --capture=sys: a process that UBSan halts loses what
# pytest captured at the level of file descriptors, its report included.
run_python -m pytest -q -p no:cacheprovider --capture=sys test/python/test_checkpoint.py \
  test/python/test_layout_exactness.py test/python/test_faults.py \
  test/python/test_autograd_contracts.py \
  test/python/test_mixed_precision.py::test_casts_do_not_pile_up_over_the_forward \
  test/python/test_mixed_precision.py::test_a_weight_several_stages_cast_is_cast_once_as_the_model_casts_it \
  test/python/test_mixed_precision.py::test_a_weight_several_stages_cast_and_read_otherwise_is_named_and_gets_its_gradient \
  "test/python/test_sizes_from_data.py::test_larger_data_plans_again_and_trains_bit_for_bit_within_the_limit[example_inputs-min]" \
  test/python/test_sizes_from_data.py::test_a_byte_limit_too_small_for_the_larger_data_runs_them_at_their_smallest \
  "$@"

# The differential fuzzer's first models (test/fuzz/): every strategy, random schedules, limits,
# deferred planning (test_deferred.py is left out: the whole suite's 40 minutes), autocast.
run_python test/fuzz/fuzz.py --seeds 0:20

echo "test-sanitize.sh: passed; build $((built - start)) s, tests $((SECONDS - built)) s"
