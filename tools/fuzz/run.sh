#!/usr/bin/env bash
# Builds the fuzzers (clang, libFuzzer, AddressSanitizer and UBSan) of the checkpoint reader, the
# safetensors reader and the image decoders and runs each from its regression corpus for a
# while, one after the other. Exit 0: no crash; 1: a crash, whose input is copied to
# tests/data/checkpoint_corpus/fuzz-crash-*.ckpt or
# tests/data/safetensors_corpus/fuzz-crash-*.safetensors (ctest replays them once fixed) or
# tests/data/image_corpus/fuzz-crash-* (the image fuzzer's seeds from then on).
#
#   tools/fuzz/run.sh [SECONDS]      each fuzzer SECONDS, default 300
#   tools/fuzz/run.sh --ci           a fixed seed and input count: the same inputs every run,
#                                    so CI fails only when the code changes (about 30 s each,
#                                    5 s for the safetensors reader's small parser)
#
# Environment: ALLOY_FUZZ_BUILD_DIR (default build-fuzz), ALLOY_JOBS (default: all cores).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
seconds="${1:-300}"
limits=(-max_total_time="$seconds")
image_limits=("${limits[@]}")
safetensors_limits=("${limits[@]}")
if [[ "$seconds" == --ci ]]; then
  limits=(-seed=1 -runs=300000)
  image_limits=(-seed=1 -runs=40000)
  safetensors_limits=(-seed=1 -runs=60000)
elif ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "run.sh: SECONDS must be a positive whole number or --ci, got '$seconds'" >&2
  exit 2
fi
build_dir="${ALLOY_FUZZ_BUILD_DIR:-$here/build-fuzz}"
jobs="${ALLOY_JOBS:-$(nproc 2>/dev/null || echo 2)}"
command -v clang++ >/dev/null || { echo "run.sh: clang++ not found (apt-get install clang)" >&2; exit 1; }

cmake -S "$here" -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DALLOY_CUDA=OFF \
  -DALLOY_FUZZ=ON -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=(checkpoint_reader_fuzz safetensors_reader_fuzz)
[[ ! -f "$build_dir/image_decode_fuzz.enabled" ]] || targets+=(image_decode_fuzz)
cmake --build "$build_dir" --target "${targets[@]}" --parallel "$jobs"

failed=0
# Runs fuzzer $1 from corpus folder $2 with the limits after them; crash inputs are saved there
# with the suffix $3.
fuzz() {
  local fuzzer=$1 corpus=$2 suffix=$3 status=0 input name
  shift 3
  # The fuzzer grows its working corpus; the committed one only ever gains crashers.
  work="$(mktemp -d)"
  cp "$corpus"/* "$work/"
  mkdir "$work/artifacts"
  "$build_dir/bin/$fuzzer" "$work" "$@" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" || status=$?
  shopt -s nullglob
  local crashes=("$work"/artifacts/*)
  for input in "${crashes[@]}"; do
    name="fuzz-$(basename "$input")$suffix"
    cp "$input" "$corpus/$name"
    echo "run.sh: saved $corpus/$name" >&2
  done
  rm -rf "$work"
  if ((status != 0 || ${#crashes[@]})); then
    echo "run.sh: $fuzzer failed (status $status, ${#crashes[@]} inputs saved)" >&2
    failed=1
  else
    echo "run.sh: $fuzzer: no crash ($*)" >&2
  fi
}

fuzz checkpoint_reader_fuzz "$here/tests/data/checkpoint_corpus" .ckpt "${limits[@]}"
fuzz safetensors_reader_fuzz "$here/tests/data/safetensors_corpus" .safetensors \
  "${safetensors_limits[@]}"
if [[ " ${targets[*]} " == *" image_decode_fuzz "* ]]; then
  fuzz image_decode_fuzz "$here/tests/data/image_corpus" "" "${image_limits[@]}"
else
  echo "run.sh: image_decode_fuzz not built (TurboJPEG or libpng missing)" >&2
fi
exit "$failed"
