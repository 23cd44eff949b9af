#!/usr/bin/env bash
# Fails when a tracked C++ or CUDA source differs from what clang-format makes of it with the
# repository's .clang-format; lists the files and the command that fixes them.
# Exit 77 (ctest: skipped) when clang-format or git is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
for tool in clang-format git; do
  if ! command -v "$tool" >/dev/null; then
    echo "check_format: skipped: $tool not found (tools/setup.sh installs it)"
    exit 77
  fi
done
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check_format: skipped: $(pwd) is not a git checkout"
  exit 77
fi
mapfile -t sources < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
unformatted=()
for source in "${sources[@]}"; do
  [[ -f "$source" ]] || continue
  if ! clang-format --dry-run -Werror "$source" >/dev/null 2>&1; then
    unformatted+=("$source")
  fi
done
if ((${#unformatted[@]})); then
  echo "check_format: ${#unformatted[@]} of ${#sources[@]} files are not clang-formatted:"
  printf '  %s\n' "${unformatted[@]}"
  echo "fix: clang-format -i ${unformatted[*]}"
  exit 1
fi
echo "check_format: all ${#sources[@]} sources match .clang-format ($(clang-format --version))"
