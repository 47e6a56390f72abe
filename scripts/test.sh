#!/usr/bin/env bash
# Installs what is missing, checks the formatting, builds, and runs every test: GoogleTest,
# lit/FileCheck, pytest and the two installations (cmake --install, pip install) through ctest,
# the differential fuzzer, plus the solver, and the runtime, passes, planner and bindings with the
# Python exactness tests, under AddressSanitizer and UBSan, all on Debian's PyTorch 1.13; then the
# suite against PyTorch 2.14 and what differs on 2.6 (scripts/test-torch2.sh; JITCKPT_SKIP_TORCH2=1
# skips both). docs/development.md says what each line runs, and why that is enough.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase says when it ended, so that CI's log shows where the time goes.
done_at() { echo "test.sh: $1 done at $((SECONDS / 60)) min $((SECONDS % 60)) s"; }
./scripts/install-deps.sh
jobs=$(nproc)
done_at "installing the dependencies"

# The PyTorch 2.x roots download and install (mostly waiting on the network) while this builds.
lines=(2.14 2.6)
declare -A prepare_pid prepare_log
if [ "${JITCKPT_SKIP_TORCH2:-0}" != 1 ]; then
  for line in "${lines[@]}"; do
    prepare_log[$line]=$(mktemp)
    ./scripts/test-torch2.sh "$line" --prepare >"${prepare_log[$line]}" 2>&1 &
    prepare_pid[$line]=$!
  done
fi

# Every C++ file formatted with the project's .clang-format.
./scripts/format.sh --check
done_at "the format check"

# The solver library alone: proves it builds and tests without LibTorch, under the sanitizers.
cmake -S . -B build-sanitize -G Ninja -DJITCKPT_WITH_TORCH=OFF -DJITCKPT_SANITIZE=ON \
  -DJITCKPT_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-sanitize -j"$jobs"
# (The six longest comparisons take six minutes under ASan, one of them three and a half; they and
# the full-size tables held to hashes run optimized in the suite on the installed LibTorch, below.)
longest="PassThroughChainsEqualExhaustiveSearch|EqualsTheExhaustiveSearchsSmallestLimit"
longest+="|StrictlyFasterNonPersistentScheduleExists|StagesThatRunOnceEqualExhaustiveSearch"
longest+="|EveryCurvePointSolves|FitsTheLimitAndIsNeverSlowerThanAFittingCandidate|TableHash"
ctest --test-dir build-sanitize --output-on-failure -j"$jobs" -E "$longest"
done_at "the solver under the sanitizers"

# Runtime, passes, planner and bindings under AddressSanitizer and UBSan: the Python exactness tests and the
# fuzzer's first models in Debian's python3 with ASan's runtime preloaded (about 5 minutes).
./scripts/test-sanitize.sh
done_at "the runtime under the sanitizers"

# The suite against the LibTorch that is installed (Debian's 1.13), but for the four exactness files
# the sanitizers ran whole, with the fuzzer's first 150 models. (Release: no debug information to
# compile and link; examples/ is built out of tree by the install test; no link-time
# optimization, which compiles the Python module's code a second time at its link, and the tests
# time nothing.)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DJITCKPT_BUILD_EXAMPLES=OFF \
  -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF -DJITCKPT_FUZZ_MODELS=150 >/dev/null
cmake --build build -j"$jobs"
done_at "the build on the installed LibTorch"
elsewhere="checkpoint|layout_exactness|faults|autograd_contracts"
ctest --test-dir build --output-on-failure -j"$jobs" -E "^pytest_test_($elsewhere)\$"
done_at "the suite on the installed LibTorch"

# PyTorch 2.14 (Debian sid) and 2.6 (Debian trixie), each in a root of its own.
if [ "${JITCKPT_SKIP_TORCH2:-0}" != 1 ]; then
  for line in "${lines[@]}"; do
    wait "${prepare_pid[$line]}" || {
      cat "${prepare_log[$line]}"
      echo "test.sh: preparing the PyTorch $line root failed"
      exit 1
    }
    cat "${prepare_log[$line]}"
    ./scripts/test-torch2.sh "$line"
    done_at "the PyTorch $line line"
  done
fi
