#!/usr/bin/env bash
# Builds the checkpoint-reader fuzzer (clang, libFuzzer, AddressSanitizer and UBSan) and runs it
# from the regression corpus for a while. Exit 0: no crash; 1: a crash, whose input is copied to
# tests/data/checkpoint_corpus/fuzz-crash-*.ckpt for ctest to replay once fixed.
#
#   tools/fuzz/run.sh [SECONDS]      default 300
#   tools/fuzz/run.sh --ci           a fixed seed and input count: the same inputs every run,
#                                    so CI fails only when the code changes (about 30 s)
#
# Environment: ALLOY_FUZZ_BUILD_DIR (default build-fuzz), ALLOY_JOBS (default: all cores).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
seconds="${1:-300}"
limits=(-max_total_time="$seconds")
if [[ "$seconds" == --ci ]]; then
  limits=(-seed=1 -runs=300000)
elif ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "run.sh: SECONDS must be a positive whole number or --ci, got '$seconds'" >&2
  exit 2
fi
build_dir="${ALLOY_FUZZ_BUILD_DIR:-$here/build-fuzz}"
jobs="${ALLOY_JOBS:-$(nproc 2>/dev/null || echo 2)}"
corpus="$here/tests/data/checkpoint_corpus"
command -v clang++ >/dev/null || { echo "run.sh: clang++ not found (apt-get install clang)" >&2; exit 1; }

cmake -S "$here" -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DALLOY_CUDA=OFF \
  -DALLOY_FUZZ=ON -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" --target checkpoint_reader_fuzz --parallel "$jobs"

# The fuzzer grows its working corpus; the committed one only ever gains crashers.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$corpus"/* "$work/"
mkdir "$work/artifacts"
status=0
"$build_dir/bin/checkpoint_reader_fuzz" "$work" "${limits[@]}" -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" || status=$?
shopt -s nullglob
crashes=("$work"/artifacts/*)
for input in "${crashes[@]}"; do
  name="fuzz-$(basename "$input").ckpt"
  cp "$input" "$corpus/$name"
  echo "run.sh: saved $corpus/$name" >&2
done
if ((status != 0 || ${#crashes[@]})); then
  echo "run.sh: the fuzzer failed (status $status, ${#crashes[@]} inputs saved)" >&2
  exit 1
fi
echo "run.sh: no crash (${limits[*]})" >&2
