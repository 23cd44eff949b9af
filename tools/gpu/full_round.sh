#!/usr/bin/env bash
# One device call of about 6 minutes that measures everything issue 14 asks for, on the packed
# commit (2026-11-27 on an H200: 357 s without the seeds phase, which adds about 50):
#   1. tools/gpu/lenet_round.sh: the gpu tests, the LeNet probes (conv_algorithms,
#      gemm_algorithms), the LeNet bench (5 rounds) and the LeNet profile with one step's
#      launches in order;
#   2. tools/gpu/check.sh --phases recipe,seeds,resume,mem,ddp: the recipe at O0-O3 and forced
#      2^40, O0-O3 over seeds 1-5, bit-exact resume, alloy mem, DDP on one GPU;
#   3. one round of tools/bench/gpu_vs_pytorch.sh --parts resnet18 (its first tier: Alloy and
#      the PyTorch rows of its goals, within the budget).
# A device call brings back at most 8 files, so everything goes under one folder that is packed
# into DIR/round.tar.gz after each part: a call cut short still returns the parts it finished.
#
#   tools/gpu/pack.sh     # here, first
#   ALLOY_COMMIT=<commit> bash .gpu/on-device.sh bash tools/gpu/full_round.sh "$OUT"
#
# (timeout_s about 480). Exit status: 0 when every part exited 0, else 1.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: full_round.sh DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/round"
status=0
pack() {
  tar -czf "$out/round.tar.gz.part" -C "$work" round && mv "$out/round.tar.gz.part" "$out/round.tar.gz"
}
cd "$here" || exit 2
echo "== lenet_round $(date -u +%T)"
bash tools/gpu/lenet_round.sh "$work/round/lenet" 5 2>&1 | tee "$work/round/lenet_round.log" ||
  status=1
pack
echo "== check.sh recipe,seeds,resume,mem,ddp $(date -u +%T)"
bash tools/gpu/check.sh --phases recipe,seeds,resume,mem,ddp --budget 270 \
  --out "$work/round/check" >"$work/round/check.log" 2>&1 || status=1
grep -E '^\| (recipe|seeds|resume|mem|ddp) ' "$work/round/check/summary.md" | cut -c1-220
pack
echo "== resnet18 bench, 1 round $(date -u +%T)"
timeout 110 bash tools/bench/gpu_vs_pytorch.sh --parts resnet18 --rounds 1 \
  --time-budget 100 --commit "${ALLOY_COMMIT:-unknown}" --out "$work/round/resnet" \
  >"$work/round/resnet.log" 2>&1 || status=1
grep '^| resnet18 | alloy' "$work/round/resnet/gpu_bench.md"
pack
echo "== end $(date -u +%T)"
exit "$status"
