#!/usr/bin/env bash
# Installs what is missing, checks the formatting, builds, and runs every test: GoogleTest,
# lit/FileCheck and pytest through ctest, plus the torch-free solver under AddressSanitizer and
# UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs=$(nproc)

# Every C++ file formatted with the project's .clang-format.
./scripts/format.sh --check

# The solver library alone: proves it builds and tests without LibTorch, under the sanitizers.
cmake -S . -B build-sanitize -G Ninja -DJITCKPT_WITH_TORCH=OFF -DJITCKPT_SANITIZE=ON \
  -DJITCKPT_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-sanitize -j"$jobs"
ctest --test-dir build-sanitize --output-on-failure -j"$jobs"

# Everything, against the LibTorch that is installed (Debian's 1.13 by default).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
