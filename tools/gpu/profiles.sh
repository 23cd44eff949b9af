#!/usr/bin/env bash
# The kernel profiles docs/PERFORMANCE.md quotes, in one go: LeNet O0, the ffn model at O2 and
# resnet18 at O0 and O2, each through tools/gpu/kernel_times.sh over a window of graph-replay
# launches after the warm-up and the capture, with the time per step (one `sgd` launch a step).
# Each table goes to DIR/NAME.txt; the CSVs stay in /tmp.
#
#   ALLOY=path/to/alloy tools/gpu/profiles.sh DIR [NAME...]
#
# NAME: lenet-O0, resnet18-O2, resnet18-O0, ffn-O2 (default: all, in this order). On a lent GPU
# machine (all four take under a minute of device time):
#   bash .gpu/on-device.sh bash tools/gpu/profiles.sh "$OUT"
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:?usage: profiles.sh DIR [NAME...]}
shift
alloy=${ALLOY:-build/bin/alloy}
mkdir -p "$out" /tmp/profiles
names=("$@")
((${#names[@]})) || names=(lenet-O0 resnet18-O2 resnet18-O0 ffn-O2)
status=0
for name in "${names[@]}"; do
  # Windows: about 6 steps after 60 (LeNet, 42 launches a step), 3 after 36 (ffn, 83), 2 after
  # 6 (resnet18, about 450; its synthetic epoch is 50 steps).
  case $name in
    lenet-O0) window=(--skip 2500 --count 250) model=(--model lenet --epochs 1 --lr 0.2) ;;
    ffn-O2) window=(--skip 3000 --count 250) model=(--model ffn --epochs 1 --lr 0.2) ;;
    resnet18-O0 | resnet18-O2)
      window=(--skip 3000 --count 900) model=(--model resnet18 --dataset synthetic --epochs 2) ;;
    *) echo "profiles.sh: unknown profile '$name'" >&2; exit 2 ;;
  esac
  level=${name##*-}
  echo "== $name"
  # The same run unprofiled first: it measures the convolution algorithms and saves them to the
  # db, which the profiled run then reads (choices timed under ncu are not saved).
  "$alloy" train "${model[@]}" --device cuda --opt-level "$level" --batch-size 256 >/dev/null 2>&1 ||
    status=1
  bash "$here/kernel_times.sh" --out "/tmp/profiles/$name.csv" --per sgd --step "${window[@]}" -- \
    "$alloy" train "${model[@]}" --device cuda --opt-level "$level" --batch-size 256 \
    >"$out/$name.txt" 2>&1 || status=1
  head -n 40 "$out/$name.txt"
done
exit $status
