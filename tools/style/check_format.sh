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
present=()
for source in "${sources[@]}"; do
  [[ -f "$source" ]] && present+=("$source")
done
# One clang-format for all the files (a process per file costs more than the formatting): it
# reads on past a file that fails and names each place that would change, "FILE:LINE:COL: error:".
status=0
report=$(clang-format --dry-run -Werror "${present[@]}" 2>&1) || status=$?
mapfile -t unformatted < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' \
  <<<"$report" | awk '!seen[$0]++')
if ((status != 0 && ${#unformatted[@]} == 0)); then
  echo "check_format: clang-format failed (exit $status); its first lines:"
  head -n 20 <<<"$report"
  exit 1
fi
if ((${#unformatted[@]})); then
  echo "check_format: ${#unformatted[@]} of ${#sources[@]} files are not clang-formatted:"
  printf '  %s\n' "${unformatted[@]}"
  echo "fix: clang-format -i ${unformatted[*]}"
  exit 1
fi
echo "check_format: all ${#sources[@]} sources match .clang-format ($(clang-format --version))"
