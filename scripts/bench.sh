#!/usr/bin/env bash
# The paper's experiment (section 5; bench/paper_suite.py) in one command.
#
#   scripts/bench.sh cpu [options]   here (Debian 12, LibTorch 1.13, CPU): installs what is missing,
#                                   builds into build/, runs the CPU suite into bench/results/cpu
#                                   (cpu-small: the smaller first suite, into bench/results/cpu-small)
#   scripts/bench.sh gpu [options]   on a machine with a CUDA GPU whose python3 has PyTorch 2.x:
#                                   builds against that PyTorch into build-cuda/ (the Python module
#                                   on, tests and tools off), runs the CUDA checks
#                                   (scripts/cuda-test.sh), then the GPU suite into bench/results/gpu
#   scripts/bench.sh gpu-build       the gpu mode's build and CUDA checks alone (scripts/gpu-suite.sh
#                                   runs it first)
#   scripts/bench.sh header-deps     here: unpacks Debian's header-only nlohmann-json into .deps/,
#                                   for a GPU machine that has no package registry; bring .deps/
#                                   along and the gpu build finds it by itself
#
# Options go to bench/paper_suite.py, then to each bench/models_bench.py run: --only resnet1001,
# --skip-done, --out DIR, --runs 3, --min-seconds 0.5, --compile-budgets 0.5,1.0, ...
# PYTHON picks the interpreter for gpu (default python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mode=${1:-}
shift || true

case "$mode" in
  cpu | cpu-small)
    ./scripts/install-deps.sh
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build build -j"$(nproc)"
    PYTHONPATH=build/python:bench exec /usr/bin/python3 bench/paper_suite.py "$mode" "$@"
    ;;
  gpu | gpu-build)
    python=${PYTHON:-python3}
    if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      echo "bench.sh gpu: '$python' has no PyTorch that sees a CUDA GPU; run it where one is (PYTHON=...)" >&2
      exit 1
    fi
    pybind11_dir=$("$python" -c 'import pybind11; print(pybind11.get_cmake_dir())' 2>/dev/null) || {
      echo "bench.sh gpu: '$python' has no pybind11 (pip install pybind11)" >&2
      exit 1
    }
    export JITCKPT_CMAKE_ARGS="-DJITCKPT_BUILD_PYTHON=ON -DPython3_EXECUTABLE=$(command -v "$python") -Dpybind11_DIR=$pybind11_dir"
    PYTHON=$python ./scripts/cuda-test.sh "$root/build-cuda"
    [ "$mode" = gpu-build ] && exit 0
    PYTHONPATH=build-cuda/python:bench exec "$python" bench/paper_suite.py gpu "$@"
    ;;
  header-deps)
    work=$(mktemp -d)
    (cd "$work" && apt-get download nlohmann-json3-dev)
    rm -rf .deps && mkdir -p .deps
    dpkg -x "$work"/nlohmann-json3-dev_*.deb .deps
    rm -rf "$work"
    echo "unpacked into .deps/: $(ls .deps/usr/share/cmake)"
    ;;
  *)
    sed -n '2,20p' "$0" >&2
    exit 2
    ;;
esac
