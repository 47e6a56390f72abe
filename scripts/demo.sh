#!/usr/bin/env bash
# The main job on a built-in example: installs what is missing, builds, and runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
./build/tools/solve/jitckpt-solve --builtin resnet1001 --memory-limit 0.5 --curve 10
