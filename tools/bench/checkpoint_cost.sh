#!/usr/bin/env bash
# The cost of checkpointing every 10 steps, synchronous against asynchronous (--async-checkpoint),
# for LeNet and ResNet-18 on the synthetic data set: for each model, one epoch without saves,
# one with a synchronous save every 10 steps and one with an asynchronous save every 10 steps,
# in turn, --repeat times. Each checkpoint event of the JSON log carries stall_seconds (how long
# the save held the training thread up) and write_seconds (serialize, write, fsync, rename and
# prune, on the training thread or on the writer thread), so the cost of a save is measured
# save by save inside a run, not as a difference of epoch times, which the load of a shared
# machine swamps. Prints one line per model: the step time without saves (fastest epoch), the
# mean stall of a synchronous and of an asynchronous save, the mean background write of an
# asynchronous save, the share of the synchronous save time that the asynchronous save hides
# (1 - async stall / sync stall), the epoch time of each mode and the size of one checkpoint.
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

# One epoch of model $1 in mode $2 (none, sync, async); prints
# "epoch_seconds steps mean_stall mean_write bytes" (the means over the saves inside the epoch).
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
epoch, saves = None, []
for line in open(sys.argv[1]):
    event = json.loads(line)
    if event["event"] == "epoch":
        epoch = event
    elif event["event"] == "checkpoint" and epoch is None:  # inside the epoch, not its end
        saves.append(event)
stall = sum(s["stall_seconds"] for s in saves) / len(saves) if saves else 0
write = sum(s["write_seconds"] for s in saves) / len(saves) if saves else 0
print(epoch["epoch_seconds"], epoch["step"], stall, write, sys.argv[2])
PY
}

echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$here" rev-parse --short HEAD 2>/dev/null)," \
  "$(lscpu | sed -n 's/^Model name: *//p'), $threads threads, device $device, $level," \
  "batch $batch, a save every 10 steps" >&2
printf '%-9s %9s %11s %12s %12s %7s %22s %6s\n' model "step ms" "sync stall" "async stall" \
  "async write" hidden "epoch s none/sync/async" "MB"
IFS=, read -ra list <<<"$models"
for model in "${list[@]}"; do
  declare -A epoch=() stall=() write=()
  steps=0 bytes=0
  for ((r = 0; r < repeat; ++r)); do
    for mode in none sync async; do
      read -r seconds steps mean_stall mean_write size < <(run "$model" "$mode")
      echo "  $model $mode: $seconds s for $steps steps; per save: stall $mean_stall s," \
        "write $mean_write s" >&2
      [[ "$size" != 0 ]] && bytes=$size
      # The fastest epoch of each mode, and the save figures of that run.
      if [[ -z "${epoch[$mode]:-}" ]] ||
        awk -v a="$seconds" -v b="${epoch[$mode]}" 'BEGIN {exit !(a < b)}'; then
        epoch[$mode]=$seconds stall[$mode]=$mean_stall write[$mode]=$mean_write
      fi
    done
  done
  awk -v none="${epoch[none]}" -v sync="${epoch[sync]}" -v async="${epoch[async]}" \
    -v ss="${stall[sync]}" -v as="${stall[async]}" -v aw="${write[async]}" -v steps="$steps" \
    -v bytes="$bytes" -v model="$model" 'BEGIN {
      hidden = ss > 0 ? (1 - as / ss) * 100 : 0
      printf "%-9s %9.1f %9.1f ms %9.1f ms %9.1f ms %6.0f%% %8.1f/%.1f/%.1f %6.1f\n", model,
        none / steps * 1000, ss * 1000, as * 1000, aw * 1000, hidden, none, sync, async,
        bytes / 1e6
    }'
  unset epoch stall write
done
