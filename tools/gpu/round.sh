#!/usr/bin/env bash
# One device call that measures the real workloads on a GPU against PyTorch at its best, and
# leaves every raw record under DIR:
#   tests  ctest -L gpu (tools/gpu/check.sh --phases tests)
#   bench  tools/gpu/bench_round.sh with BENCH's options (default: --parts resnet50,gpt2,lenet,
#          resnet18 --rounds 2 --time-budget 300: Alloy's rows and the PyTorch rows its goals
#          compare against come first, the extras as the budget allows)
#   mem    alloy mem --device cuda --model resnet50 --image-size 224 with --max-batch
#   seeds  the LeNet recipe at O0, O3 and O3 --stochastic-rounding over seeds 1-5, paired
#          against O0 by tools/stats/paired_seeds.py
#   ddp    DDP at world size 1 over NCCL against one process (tools/gpu/check.sh --phases ddp)
# A device call brings back at most 8 files, so everything goes under DIR/round and is packed
# into DIR/round.tar.gz after each phase: a call cut short still returns the phases it finished.
#
#   tools/gpu/pack.sh                 # here, first
#   ALLOY_COMMIT=<commit> bash .gpu/on-device.sh bash tools/gpu/round.sh "$OUT" \
#       [--phases LIST] [--bench "gpu_vs_pytorch.sh options"]
#
# Exit status: 0 when every phase exited 0, else 1.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: round.sh DIR [--phases LIST] [--bench OPTIONS]}
shift
phases=tests,bench,mem,seeds,ddp
bench="--parts resnet50,gpt2,lenet,resnet18 --rounds 2 --time-budget 300"
while (($#)); do
  case $1 in
    --phases) phases=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    *) echo "round.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
alloy=${ALLOY:-$here/build/bin/alloy}
commit=${ALLOY_COMMIT:-unknown}
work=$out/round
mkdir -p "$work"
status=0
pack() {
  tar -czf "$out/round.tar.gz.part" -C "$out" round && mv "$out/round.tar.gz.part" "$out/round.tar.gz"
}
wanted() { [[ ,$phases, == *,$1,* ]]; }
stamp() { echo "== $1 $(date -u +%T)"; }
cd "$here" || exit 2
nvidia-smi >"$work/nvidia-smi.txt" 2>&1

if wanted tests; then
  stamp tests
  bash tools/gpu/check.sh --phases tests --budget 150 --out "$work/tests" >"$work/tests.log" 2>&1 ||
    status=1
  grep -E '^\| tests ' "$work/tests/summary.md" | cut -c1-200
  pack
fi

if wanted bench; then
  stamp "bench $bench"
  # shellcheck disable=SC2086 # the options are words
  bash tools/gpu/bench_round.sh "$work/bench" $bench --commit "$commit" >"$work/bench.log" 2>&1 ||
    status=1
  tail -n 40 "$work/bench.log"
  pack
fi

if wanted mem; then
  stamp "mem resnet50 224"
  timeout 150 "$alloy" mem --device cuda --model resnet50 --image-size 224 --channels 3 \
    --num-classes 1000 --batch-size 256 --max-batch --max-batch-limit 4096 \
    --json "$work/mem-resnet50.jsonl" >"$work/mem-resnet50.txt" 2>&1 || status=1
  tail -n 12 "$work/mem-resnet50.txt"
  pack
fi

if wanted seeds; then
  stamp "seeds: LeNet O0, O3, O3 --stochastic-rounding, seeds 1-5"
  timeout 200 python3 tools/stats/paired_seeds.py --alloy "$alloy" --seeds 1-5 \
    --record "$work/seeds.jsonl" --baseline O0 \
    --common "train --model lenet --device cuda --batch-size 256 --lr 0.2 --epochs 10" \
    --setting O0="--opt-level O0" --setting O3="--opt-level O3" \
    --setting O3+SR="--opt-level O3 --stochastic-rounding" \
    --setting O3-bf16+SR="--opt-level O3 --half-dtype bf16 --stochastic-rounding" \
    >"$work/seeds.txt" 2>&1 || status=1
  grep -v '^{' "$work/seeds.txt" | tail -n 12
  pack
fi

if wanted ddp; then
  stamp ddp
  bash tools/gpu/check.sh --phases ddp --budget 90 --out "$work/ddp" >"$work/ddp.log" 2>&1 ||
    status=1
  grep -E '^\| ddp ' "$work/ddp/summary.md" | cut -c1-200
  pack
fi
stamp end
exit "$status"
