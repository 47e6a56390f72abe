#!/usr/bin/env bash
# Formats every C++ file with the project's .clang-format; with --check, changes nothing and fails
# (listing the files) when any file is not formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cc' '*.hpp')
if [ "${1:-}" = "--check" ]; then
  if ! clang-format --dry-run -Werror "${files[@]}" 2>/tmp/jitckpt-format.log; then
    echo "format: these files are not formatted (run ./scripts/format.sh):" >&2
    grep -oE '^[^:]+\.(cpp|h|cc|hpp)' /tmp/jitckpt-format.log | sort -u >&2
    exit 1
  fi
  echo "format: ${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
