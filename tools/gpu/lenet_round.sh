#!/usr/bin/env bash
# One device call for LeNet's speed against PyTorch's: what a kernel change on LeNet's path needs
# measured, in the order that keeps the figures clean (the bench before any profiler, whose
# timed choices the algorithm db would otherwise hold):
#   1. ctest -L gpu through tools/gpu/check.sh --phases tests (a change must not break them);
#   2. tools/gpu/conv_algorithms --model lenet: cuDNN's algorithms and each direct kernel;
#   3. tools/gpu/gemm_algorithms: cuBLAS's algorithms and small_gemm, per linear product;
#   4. tools/bench/gpu_vs_pytorch.sh --parts lenet, ROUNDS rounds (default 5);
#   5. tools/gpu/profiles.sh lenet-O0: the step's kernels.
# Everything goes to DIR (at most 8 files come back from a device call: 7 here).
#
#   ALLOY_COMMIT=<commit> bash .gpu/on-device.sh bash tools/gpu/lenet_round.sh "$OUT" [ROUNDS]
#
# About 4 minutes on one GPU, most of them the tests and the bench: it fits one device call.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: lenet_round.sh DIR [ROUNDS]}
rounds=${2:-5}
[[ $rounds =~ ^[1-9][0-9]?$ ]] || { echo "lenet_round.sh: ROUNDS is a count, not '$rounds'" >&2; exit 2; }
build=${ALLOY_BUILD:-$here/build}
mkdir -p "$out"
status=0
cd "$here" || exit 2
echo "== gpu tests"
bash tools/gpu/check.sh --phases tests --budget 120 --out "$out/check" || status=1
echo "== conv_algorithms --model lenet"
"$build/bin/conv_algorithms" --batch 256 --model lenet >"$out/conv_algorithms.txt" 2>&1 || status=1
grep NCHW "$out/conv_algorithms.txt" | grep f32
echo "== gemm_algorithms"
"$build/bin/gemm_algorithms" >"$out/gemm_algorithms.txt" 2>&1 || status=1
grep -E "lenet.*(default|small_gemm)" "$out/gemm_algorithms.txt"
echo "== LeNet bench, $rounds rounds"
bash tools/bench/gpu_vs_pytorch.sh --parts lenet --rounds "$rounds" --time-budget 150 \
  --commit "${ALLOY_COMMIT:-unknown}" --out /tmp/lenet-bench >"$out/lenet_bench.txt" 2>&1 ||
  status=1
cp /tmp/lenet-bench/gpu_bench.md "$out/lenet_bench.md" 2>/dev/null || status=1
grep "^| lenet | alloy" "$out/lenet_bench.md"
echo "== profile lenet-O0"
ALLOY="$build/bin/alloy" timeout 60 bash tools/gpu/profiles.sh /tmp/lenet-profile lenet-O0 \
  >/dev/null 2>&1 || status=1
cp /tmp/lenet-profile/lenet-O0.txt "$out/lenet-O0-profile.txt" 2>/dev/null || status=1
head -n 30 "$out/lenet-O0-profile.txt" 2>/dev/null
exit "$status"
