#!/usr/bin/env bash
# The cost of checkpointing every 10 steps, synchronous against asynchronous (--async-checkpoint),
# for LeNet and ResNet-18 on the synthetic data set: for each model, one epoch without saves,
# one with a synchronous save every 10 steps and one with an asynchronous save every 10 steps,
# in turn, --repeat times; the fastest epoch of each kind counts. Prints one line per model:
# step time without saves, the time a synchronous save adds per save, the time an asynchronous
# save adds per save, the share of the save time the asynchronous save hides, and the size of
# one checkpoint.
#
#   tools/bench/checkpoint_cost.sh [--models lenet,resnet18] [--batch-size N] [--threads N]
#                                  [--opt-level L] [--repeat N] [--device D] [--alloy PATH]
#                                  [--dir DIR]
#
# Defaults: lenet and resnet18, batch 256 (50 steps an epoch, 5 saves), every core this process
# may use, O2, 2 repeats, --device cpu, build/bin/alloy, checkpoints in a temporary directory
# (--dir: on the file system to measure; it is emptied between runs). Step time is the epoch's
# training time (epoch_seconds of the JSON log: steps and the saves made between them, test
# evaluation and the epoch-end save excluded) over its steps.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
models=lenet,resnet18
batch=256
threads="$(nproc)"
level=O2
repeat=2
device=cpu
alloy="$here/build/bin/alloy"
dir=""

while (($#)); do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --batch-size) batch="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --opt-level) level="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "checkpoint_cost.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

[[ -x "$alloy" ]] || { echo "checkpoint_cost.sh: $alloy not found: run tools/setup.sh" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ckpt="${dir:-$work/checkpoints}"

# One epoch of model $1 in mode $2 (none, sync, async); prints "epoch_seconds steps bytes".
run() {
  local model="$1" mode="$2" flags=()
  rm -rf "$ckpt"
  case "$mode" in
    sync) flags=(--checkpoint-dir "$ckpt" --checkpoint-every 10 --keep-checkpoints 2) ;;
    async) flags=(--checkpoint-dir "$ckpt" --checkpoint-every 10 --keep-checkpoints 2
      --async-checkpoint) ;;
  esac
  "$alloy" train --model "$model" --dataset synthetic --epochs 1 --batch-size "$batch" \
    --threads "$threads" --opt-level "$level" --momentum 0.9 --device "$device" \
    "${flags[@]}" --log-json "$work/log.jsonl" >/dev/null 2>"$work/err" ||
    { cat "$work/err" >&2; exit 1; }
  local bytes=0
  [[ "$mode" == none ]] || bytes=$(stat -c %s "$(ls "$ckpt"/step-*.ckpt | tail -1)")
  python3 - "$work/log.jsonl" "$bytes" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    event = json.loads(line)
    if event["event"] == "epoch":
        print(event["epoch_seconds"], event["step"], sys.argv[2])
PY
}

echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$here" rev-parse --short HEAD 2>/dev/null)," \
  "$(lscpu | sed -n 's/^Model name: *//p'), $threads threads, device $device, $level," \
  "batch $batch, a save every 10 steps" >&2
printf '%-9s %12s %14s %15s %8s %10s\n' model "step (ms)" "sync +ms/save" "async +ms/save" \
  hidden "ckpt (MB)"
IFS=, read -ra list <<<"$models"
for model in "${list[@]}"; do
  declare -A best=()
  steps=0 bytes=0
  for ((r = 0; r < repeat; ++r)); do
    for mode in none sync async; do
      read -r seconds steps size < <(run "$model" "$mode")
      echo "  $model $mode: $seconds s for $steps steps" >&2
      [[ "$size" != 0 ]] && bytes=$size
      if [[ -z "${best[$mode]:-}" ]] || awk -v a="$seconds" -v b="${best[$mode]}" 'BEGIN {exit !(a < b)}'; then
        best[$mode]=$seconds
      fi
    done
  done
  # Saves inside the epoch: every 10 steps but the last (the epoch-end save is not timed).
  awk -v none="${best[none]}" -v sync="${best[sync]}" -v async="${best[async]}" -v steps="$steps" \
    -v bytes="$bytes" -v model="$model" 'BEGIN {
      saves = int((steps - 1) / 10)
      sync_cost = (sync - none) / saves * 1000
      async_cost = (async - none) / saves * 1000
      hidden = sync_cost > 0 ? (1 - async_cost / sync_cost) * 100 : 0
      printf "%-9s %12.1f %14.1f %15.1f %7.0f%% %10.1f\n", model, none / steps * 1000, sync_cost,
        async_cost, hidden, bytes / 1e6
    }'
  unset best
done
