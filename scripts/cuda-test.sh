#!/usr/bin/env bash
# CUDA check for anyone with a GPU: builds jitckpt against the PyTorch of the current Python with
# CUDA on (no GoogleTest, FileCheck or CLI11 needed: tests and tools off), then runs the CUDA check program
# test/runtime/probe_cuda_check (CUDA probe, CUDA-event timing, the profiler on CUDA, model state,
# a rewritten training step's memory and gradients).
#
#   scripts/cuda-test.sh [BUILD_DIR]      (default: build-cuda; PYTHON=... picks the interpreter)
#
# Exits non-zero when the build or any check fails; prints SKIPPED and exits 0 when PyTorch has no
# CUDA or no GPU is visible. Needs CMake >= 3.18, a C++17 compiler, the CUDA toolkit that PyTorch's
# CMake config looks for, and nlohmann-json (Debian/Ubuntu: nlohmann-json3-dev; where no registry is
# reached, `scripts/bench.sh header-deps` on a Debian machine unpacks it into .deps/ to bring along).
# The C++ compiler must link the shared libstdc++ (CMake refuses one that does not; on the lent GPU
# machines the `c++` first on PATH does not: run with CXX=/usr/bin/g++).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-cuda}
python=${PYTHON:-python3}

if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "FAILED: '$python' cannot import torch; set PYTHON to the interpreter that has PyTorch" >&2
  exit 1
fi
read -r torch_version has_cuda gpus prefix < <("$python" -c '
import torch
print(torch.__version__, torch.version.cuda is not None, torch.cuda.device_count() if torch.cuda.is_available() else 0,
      torch.utils.cmake_prefix_path)')
echo "PyTorch $torch_version (CUDA build: $has_cuda, visible GPUs: $gpus), CMake prefix $prefix"
if [[ "$has_cuda" != "True" ]]; then
  echo "SKIPPED: this PyTorch has no CUDA"
  exit 0
fi
if [[ "$gpus" == "0" ]]; then
  echo "SKIPPED: no CUDA device visible"
  exit 0
fi

generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
jobs=$(nproc 2>/dev/null || echo 4)
# The check project builds the whole library (runtime, passes, planner, tools) from the repository root with
# tests, benchmarks and Python bindings off, plus the check program.
# Header-only dependencies unpacked by `scripts/bench.sh header-deps` (for machines without a
# package registry) are found in .deps/; JITCKPT_CMAKE_ARGS adds options (bench.sh gpu: Python).
[ -d "$root/.deps/usr" ] && prefix="$prefix;$root/.deps/usr"
read -r -a extra <<<"${JITCKPT_CMAKE_ARGS:-}"
cmake -S "$root/test/runtime/probe_cuda_check" -B "$build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" "${extra[@]}"
cmake --build "$build" -j "$jobs"

echo "== running $build/jitckpt-probe-cuda-check"
"$build/jitckpt-probe-cuda-check" --require-cuda
