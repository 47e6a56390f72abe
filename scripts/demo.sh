#!/usr/bin/env bash
# The main job on a built-in example: installs what is missing, builds, then profiles, solves and
# trains a scripted torchvision ResNet-50 on the CPU at several limits and strategies, prints
# predicted against measured peak memory and time, checks the gradients, and plots into build/demo.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
PYTHONPATH=build/python /usr/bin/python3 -W ignore::UserWarning bench/demo.py --out build/demo "$@"
