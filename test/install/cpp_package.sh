#!/usr/bin/env bash
# cpp_package.sh BUILD SOURCE SCRATCH TORCH_CMAKE_PREFIX MODEL.pt
# Installs the C++ package from BUILD into SCRATCH/prefix, builds SOURCE/examples against it as a
# user's project would (find_package(jitckpt), target_link_libraries(... jitckpt::jitckpt), no
# linker flags), and runs both examples: one rewrites MODEL.pt and trains it, the other trains a
# file that the installed command line rewrote.
set -euo pipefail
build=$1 source=$2 scratch=$3 torch_prefix=$4 model=$5
rm -rf "$scratch" && mkdir -p "$scratch"
prefix=$scratch/prefix

cmake --install "$build" --prefix "$prefix" --component cpp >/dev/null
for f in include/jitckpt/jitckpt.h lib/cmake/jitckpt/jitckptConfig.cmake lib/libjitckpt.so bin/jitckpt; do
  [ -e "$prefix/$f" ] || { echo "FAIL: the installed package lacks $f"; exit 1; }
done

cmake -S "$source/examples" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_PREFIX_PATH=$prefix;$torch_prefix" >/dev/null
cmake --build "$scratch/build" -j2 >/dev/null

# The programs use the installed libraries, not the build tree's.
# (ldd's whole output first: grep -q stops reading at the first match, and under pipefail the
# writer's SIGPIPE would fail the check.)
libs=$(ldd "$scratch/build/jitckpt-train-saved")
grep -q "$prefix/lib/libjitckpt.so" <<<"$libs" ||
  { echo "FAIL: jitckpt-train-saved does not load $prefix/lib/libjitckpt.so"; echo "$libs"; exit 1; }

cd "$scratch"
"$scratch/build/jitckpt-train-example" "$model" 2,3,32,32 min 2 | tee train.log
grep -q "step 1 loss" train.log || { echo "FAIL: the example did not train"; exit 1; }
# Rewritten without inputs, it planned at its first step, for that step's inputs.
grep -q "for inputs \[\[2, 3, 32, 32\]" train.log || { echo "FAIL: the first step made no plan"; exit 1; }

"$prefix/bin/jitckpt" optimize "$model" --input 2,3,32,32 --memory-limit 0.75 -o rewritten.pt
"$scratch/build/jitckpt-train-saved" rewritten.pt 2,3,32,32 2 | tee saved.log
grep -q "step 1 loss" saved.log || { echo "FAIL: the rewritten file did not train"; exit 1; }

# A file rewritten without inputs plans in the C++ program that trains it.
"$prefix/bin/jitckpt" optimize "$model" --memory-limit 0.75 -o deferred.pt
"$scratch/build/jitckpt-train-saved" deferred.pt 2,3,32,32 2 | tee deferred.log
grep -q "step 1 loss" deferred.log || { echo "FAIL: the unplanned file did not train"; exit 1; }
echo "PASS"
