#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test jitckpt; does nothing when all is there.
set -euo pipefail
packages=(
  cmake ninja-build g++ clang-format
  libtorch-dev python3-torch python3-torchvision python3-dev pybind11-dev
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  llvm-14-tools python3-pytest python3-numpy python3-matplotlib
  libopenblas0-pthread python3-tqdm
  python3-venv python3-pip python3-setuptools python3-wheel debootstrap
)
missing=()
for p in "${packages[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
