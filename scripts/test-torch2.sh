#!/usr/bin/env bash
# test-torch2.sh LINE [--prepare|--all]: builds jitckpt against a PyTorch 2.x line and runs its
# share of the tests there, in a Debian root made with debootstrap from Debian's registry:
#   2.14  Debian sid's PyTorch 2.14 (Python 3.14, C++20): the C++ tests, lit, both installations,
#         the Python API's files (eager modules through torch.export among them, and every family
#         of the model zoo as one) and the fuzzer's regressions;
#   2.6   Debian trixie's PyTorch 2.6, against the Python module alone: every family at its
#         smallest limit in allocator blocks (float32, bfloat16, float16), carried masks, eager
#         modules through torch.export (the model zoo's families too), and the fuzzer's regressions.
# `--all` runs every test there but the solver's and the GPU suite's dry run (34 minutes on 2.14).
# docs/development.md says what runs where, and why that is enough. The roots and their build
# folders are kept between runs (in JITCKPT_TORCH2_ROOTS, default /var/tmp: jitckpt-sid,
# jitckpt-trixie): the first run takes a few minutes more to create one; later runs rebuild only
# what changed. Needs root (chroot). `--prepare` only creates the root and installs its packages
# (test.sh runs that in the background while the first suite builds).
set -euo pipefail
cd "$(dirname "$0")/.."
line=${1:-}
case "$line" in
  2.14) release=sid ;;
  2.6) release=trixie ;;
  *) echo "usage: test-torch2.sh 2.14|2.6 [--prepare|--all]"; exit 2 ;;
esac
root=${JITCKPT_TORCH2_ROOTS:-/var/tmp}/jitckpt-$release
jobs=$(nproc)
packages=(
  cmake ninja-build g++ git libtorch-dev python3-torch python3-torchvision python3-dev pybind11-dev
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev llvm-19-tools python3-pytest
  python3-numpy python3-matplotlib python3-tqdm python3-venv python3-pip python3-setuptools
  python3-wheel libopenblas0-pthread
)
# 2.14's python_arg_parser.h includes fmt/format.h; sid carries Hugging Face's transformers
# (test_hugging_face.py), which trixie does not.
[ "$release" = sid ] && packages+=(libfmt-dev python3-transformers python3-accelerate)
# Debian's registry as reached here is a snapshot: sid's Release file is past its Valid-Until.
apt_options="-o Acquire::Check-Valid-Until=false"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
# The downloads, tried three times: a registry's hiccup should not fail the suite.
retry() { "$@" || { sleep 10; "$@"; } || { sleep 30; "$@"; }; }

# The Debian mirror this machine installs from: the first entry of its apt sources for its own
# release that is no security archive (JITCKPT_DEBIAN_MIRROR overrides it).
debian_mirror() {
  local release
  release=$(. /etc/os-release && echo "$VERSION_CODENAME")
  {
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -e "$f" ] || continue
      awk -v RS= -v release="$release" '{
          uri = ""; ours = 0; n = split($0, line, "\n")
          for (i = 1; i <= n; i++) {
            if (line[i] ~ /^URIs:/) { split(line[i], field, " "); uri = field[2] }
            if (line[i] ~ /^Suites:/ && (line[i] " ") ~ (" " release " ")) ours = 1
          }
          if (ours && uri != "") print uri
        }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -e "$f" ] || continue
      awk -v release="$release" '$1 == "deb" {
          i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
          if ($(i + 1) == release) print $i
        }' "$f"
    done
  } | head -1 || true
}

if [ ! -x "$root/usr/bin/apt-get" ]; then
  mirror=${JITCKPT_DEBIAN_MIRROR:-$(debian_mirror)}
  [ -n "$mirror" ] || {
    echo "test-torch2: no Debian mirror found in /etc/apt/sources.list*; set JITCKPT_DEBIAN_MIRROR"
    exit 1
  }
  echo "test-torch2: creating a Debian $release root in $root (debootstrap from $mirror)"
  create_root() {
    $SUDO rm -rf "$root"
    $SUDO debootstrap --variant=minbase "$release" "$root" "$mirror" >/dev/null
  }
  retry create_root
fi

# /proc, /dev and /dev/shm for the tests (DDP's worker processes share memory), name resolution
# for apt; unmounted when this script ends.
mounted=()
cleanup() { for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do $SUDO umount "${mounted[i]}" || true; done; }
trap cleanup EXIT
mount_into() {  # mount_into SOURCE TARGET [OPTIONS...]
  local target=$root$2
  mountpoint -q "$target" && return
  $SUDO mkdir -p "$target"
  $SUDO mount "${@:3}" "$1" "$target"
  mounted+=("$target")
}
mount_into proc /proc -t proc
mount_into /dev /dev --bind
mount_into shm /dev/shm -t tmpfs
$SUDO cp /etc/resolv.conf "$root/etc/resolv.conf"

if [ ! -e "$root/.jitckpt-packages" ] || [ "$(cat "$root/.jitckpt-packages")" != "${packages[*]}" ]; then
  echo "test-torch2: installing libtorch $line and the test dependencies in $root"
  retry $SUDO chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive bash -c \
    "apt-get $apt_options update -qq &&
     apt-get $apt_options install -y -qq --no-install-recommends ${packages[*]} >/dev/null"
  echo "${packages[*]}" | $SUDO tee "$root/.jitckpt-packages" >/dev/null
fi
[ "${2:-}" = "--prepare" ] && exit 0

# This checkout's files (tracked, and new ones git does not ignore) replace the root's copy; the
# build folder beside it is kept.
# Copied afresh, then only the files that differ replace the root's (with the time of the copy):
# carried with their own times, an edit older than the root's last build would not be rebuilt.
$SUDO rm -rf "$root/src.new" && $SUDO mkdir -p "$root/src.new" "$root/src"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | $SUDO tar -xf - -C "$root/src.new"
(cd "$root/src.new" && find . -type f -print0) | while IFS= read -r -d '' f; do
  cmp -s "$root/src.new/$f" "$root/src/$f" || { $SUDO mkdir -p "$(dirname "$root/src/$f")" && $SUDO cp "$root/src.new/$f" "$root/src/$f"; }
done
(cd "$root/src" && find . -type f -print0) | while IFS= read -r -d '' f; do
  [ -e "$root/src.new/$f" ] || $SUDO rm -f "$root/src/$f"
done
$SUDO rm -rf "$root/src.new"

echo "test-torch2: building and testing against $($SUDO chroot "$root" python3 -c 'import torch; print("PyTorch", torch.__version__)')"
configure="cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DJITCKPT_BUILD_BENCH=OFF \
  -DJITCKPT_BUILD_EXAMPLES=OFF -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF"
if [ "${2:-}" = --all ]; then
  configure+=" -DJITCKPT_BUILD_SOLVER_TESTS=OFF"
  build="cmake --build /build -j$jobs"
  test="USE_LIBUV=0 ctest --test-dir /build --output-on-failure -j$jobs -LE gpu_suite -E pytest_test_bench"
elif [ "$line" = 2.14 ]; then
  # The C++ tests (the runtime on 2.14's autograd), lit, both installations, and the Python API's
  # own files, and the zoo as eager modules; the zoo's long files run on 1.13 and 2.6
  # (docs/development.md).
  # Debian's 2.14 has no libuv in gloo's TCP store: DDP's processes use the older one.
  configure+=" -DJITCKPT_BUILD_SOLVER_TESTS=OFF"
  build="cmake --build /build -j$jobs"
  left_out="deferred|model_families|mixed_precision|stage_groups|allocator_blocks|partition|autograd_contracts"
  left_out+="|layout_exactness|finer_stages|plot|bench|tensor_dicts"
  test="USE_LIBUV=0 ctest --test-dir /build --output-on-failure -j$jobs -LE gpu_suite \
    -E '^(pytest_test_($left_out)|fuzz_models_.*)\$'"
else
  # The Python module alone, and what 2.6's kernels and autocast decide: every family at its
  # smallest limit in 512-byte blocks, float32 and autocast to bfloat16 and float16; carried
  # masks through its attention; the fuzzer's regressions.
  build="cmake --build /build -j$jobs --target _C"
  test="ctest --test-dir /build --output-on-failure -j$jobs \
    -R '^(pytest_test_(allocator_blocks|carried_masks|compile|eager_modules|eager_parts|eager_autograd_graph|eager_zoo|fsdp|training_loops)|fuzz_regressions|fuzz_models_export)\$'"
fi
$SUDO chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root bash -c "
  set -e
  $configure >/dev/null
  $build
  $test"
