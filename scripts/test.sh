#!/usr/bin/env bash
# Installs what is missing, checks the formatting, builds, and runs every test: GoogleTest,
# lit/FileCheck, pytest and the two installations (cmake --install, pip install) through ctest,
# the differential fuzzer, plus the solver, and the runtime, passes and bindings with the Python
# exactness tests, under AddressSanitizer and UBSan; then all of it again against
# PyTorch 2.x (scripts/test-torch2.sh; JITCKPT_SKIP_TORCH2=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase says when it ended, so that CI's log shows where the time goes.
done_at() { echo "test.sh: $1 done at $((SECONDS / 60)) min $((SECONDS % 60)) s"; }
./scripts/install-deps.sh
jobs=$(nproc)
done_at "installing the dependencies"

# The PyTorch 2.x root downloads and installs (mostly waiting on the network) while this builds.
torch2_log=$(mktemp)
if [ "${JITCKPT_SKIP_TORCH2:-0}" != 1 ]; then
  ./scripts/test-torch2.sh --prepare >"$torch2_log" 2>&1 &
  torch2_prepare=$!
fi

# Every C++ file formatted with the project's .clang-format.
./scripts/format.sh --check
done_at "the format check"

# The solver library alone: proves it builds and tests without LibTorch, under the sanitizers.
cmake -S . -B build-sanitize -G Ninja -DJITCKPT_WITH_TORCH=OFF -DJITCKPT_SANITIZE=ON \
  -DJITCKPT_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-sanitize -j"$jobs"
# (The three longest exhaustive comparisons take two minutes under ASan; the suite on the installed
# LibTorch runs them, optimized, below.)
ctest --test-dir build-sanitize --output-on-failure -j"$jobs" \
  -E 'PassThroughChainsEqualExhaustiveSearch|EqualsTheExhaustiveSearchsSmallestLimit|StrictlyFasterNonPersistentScheduleExists'
done_at "the solver under the sanitizers"

# Runtime, passes and bindings under AddressSanitizer and UBSan: the Python exactness tests and the
# fuzzer's first models in Debian's python3 with ASan's runtime preloaded (about 5 minutes).
./scripts/test-sanitize.sh
done_at "the runtime under the sanitizers"

# Everything, against the LibTorch that is installed (Debian's 1.13 by default).
# (Release: no debug information to compile and link; examples/ is built out of
# tree by the install test; no link-time optimization, which compiles the Python module's code a
# second time at its link, and the tests time nothing.)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DJITCKPT_BUILD_EXAMPLES=OFF \
  -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
done_at "the suite on the installed LibTorch"

# The same suite against PyTorch 2.6 (Debian trixie's, in a root of its own).
if [ "${JITCKPT_SKIP_TORCH2:-0}" != 1 ]; then
  wait "$torch2_prepare" || { cat "$torch2_log"; echo "test.sh: preparing the PyTorch 2.x root failed"; exit 1; }
  cat "$torch2_log"
  ./scripts/test-torch2.sh
  done_at "the suite on PyTorch 2.x"
fi
