#!/usr/bin/env bash
# Times fp32 resnet18 training steps (28x28x1 images, SGD momentum 0.9) with PyTorch on the CPU
# and with Alloy on the CPU, side by side in one go, with the same thread count, batch sizes and
# steps, over several rounds, and prints both throughputs and the ratio Alloy / PyTorch per batch
# size.
#
#   tools/bench/resnet18_vs_pytorch.sh [--batch-sizes 64,128] [--steps N] [--threads N]
#                                      [--rounds R] [--alloy PATH] [--python PATH] [--keep DIR]
#
# Defaults: batch 64 and 128, 5 steps per run, 3 rounds, every core this process may use,
# build/bin/alloy and /usr/bin/python3 (Debian's python3-torch; `tools/setup.sh --with-torch`
# installs it). Both time the same step on one synthetic batch, without data loading:
# PyTorch in tools/bench/resnet18_pytorch.py, Alloy as `alloy mem --opt-levels O0` does.
# images/s counts the steps after the first over their wall time. Run it on an otherwise idle
# machine: both runs share its cores with anything else that runs. As a figure less sensitive to
# other load it also prints images per CPU second over the same steps: PyTorch's from its own
# process times; Alloy's from the CPU time of `alloy mem --steps N` minus that of
# `alloy mem --steps 1` (the setup and the first step). Even per CPU second, oversubscribed cores
# bill spinning OpenMP threads as CPU time without work.
#
# Rounds: the speed of a shared machine or VM drifts from minute to minute (by 30% on ours), so
# one PyTorch run followed by one Alloy run gives a ratio that swings with the drift. Each round
# runs, for each batch size, PyTorch and Alloy (`--steps N`; then `--steps 1` for the CPU time),
# each a fresh process, PyTorch first in odd rounds and Alloy first in even ones, so that slow
# drift hits both frameworks alike. Per batch size it
# prints every round's figures and ratio, then the median of each framework over the rounds
# (with an even number of rounds, the mean of the middle two), the ratio of the medians, and the
# smallest and largest per-round ratio. A wide min..max range means the ratio is noise: rerun
# on a quieter machine or with more rounds. Rounds do not remove load that changes within one
# run, nor load that slows one framework more than the other.
#
# Standard output: one JSON line per round and batch size ("record": "round"), as each round
# ends, then one per batch size ("record": "summary") with the medians, the ratio of medians and
# the per-round min and max ratios. Standard error: the same in words. A CPU-time figure is null
# (n/a) where the measured CPU time of the timed steps is not positive (clock ticks are 10 ms:
# use more steps); medians and ratios of that figure then cover the other rounds.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$here/tools/bench/rounds.sh"
batch_sizes=64,128
steps=5
rounds=3
threads="$(nproc)"
alloy="$here/build/bin/alloy"
python=/usr/bin/python3
keep=""

while (($#)); do
  case "$1" in
    --batch-sizes | --steps | --threads | --rounds | --alloy | --python | --keep)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --batch-sizes) batch_sizes="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

steps=$(integer_at_least --steps "$steps" 2)
threads=$(integer_at_least --threads "$threads" 1)
rounds=$(integer_at_least --rounds "$rounds" 1)
[[ "$batch_sizes" =~ ^[0-9]+(,[0-9]+)*$ ]] ||
  usage_error "--batch-sizes must be a comma-separated list of integers, not '$batch_sizes'"
batches=()
for batch in ${batch_sizes//,/ }; do
  batch=$(integer_at_least "each of --batch-sizes" "$batch" 1)
  [[ " ${batches[*]} " == *" $batch "* ]] || batches+=("$batch")  # each batch size once
done
batch_sizes=$(IFS=,; echo "${batches[*]}")
require_alloy
make_out_dir

echo "resnet18, fp32 SGD steps on the CPU: batch $batch_sizes, $steps steps per run," \
  "$threads threads, $rounds rounds of PyTorch and Alloy side by side" >&2

# Runs "$@" with its output appended to $out/alloy.log; if it fails, prints the log and exits.
logged() {
  "$@" >>"$out/alloy.log" 2>&1 || { echo "resnet18_vs_pytorch.sh: $* failed:" >&2; cat "$out/alloy.log" >&2; exit 1; }
}

: >"$out/rounds.jsonl"
for ((round = 1; round <= rounds; round++)); do
  for batch in "${batches[@]}"; do
    tag="r$round-b$batch"
    mem=("$alloy" mem --model resnet18 --device cpu --opt-levels O0 --batch-size "$batch"
      --threads "$threads")
    # The two timed runs next to each other, PyTorch's first in odd rounds and Alloy's first in
    # even ones, so drift within a round tilts neither way; Alloy's setup run, only subtracted,
    # after both.
    if ((round % 2 == 1)); then
      "$python" "$here/tools/bench/resnet18_pytorch.py" --batch-sizes "$batch" --steps "$steps" \
        --threads "$threads" >"$out/pytorch-$tag.json"
      cpu_timed "$out/alloy-$tag.cpu" logged "${mem[@]}" --steps "$steps" \
        --json "$out/alloy-$tag.json"
    else
      cpu_timed "$out/alloy-$tag.cpu" logged "${mem[@]}" --steps "$steps" \
        --json "$out/alloy-$tag.json"
      "$python" "$here/tools/bench/resnet18_pytorch.py" --batch-sizes "$batch" --steps "$steps" \
        --threads "$threads" >"$out/pytorch-$tag.json"
    fi
    cpu_timed "$out/alloy-$tag-setup.cpu" logged "${mem[@]}" --steps 1 \
      --json "$out/alloy-$tag-setup.json"
    "$python" - "$out/pytorch-$tag.json" "$out/alloy-$tag.json" "$(cat "$out/alloy-$tag.cpu")" \
      "$(cat "$out/alloy-$tag-setup.cpu")" \
      "$round" "$rounds" "$batch" "$steps" "$threads" "$out/rounds.jsonl" <<'EOF'
import json
import sys

torch_run = json.loads(open(sys.argv[1]).readline())
level = json.loads(open(sys.argv[2]).readline())
alloy_cpu = float(sys.argv[3]) - float(sys.argv[4])
round_, rounds, batch, steps, threads = map(int, sys.argv[5:10])
records = sys.argv[10]  # full precision, for the summary; standard output gets rounded figures
timed = steps - 1
assert torch_run["batch_size"] == batch and torch_run["timed_steps"] == timed, torch_run


def ratio(a, b):
    return None if a is None or b is None else a / b


def fmt(x, digits=1, suffix=""):
    return "n/a" if x is None else f"{x:.{digits}f}{suffix}"


t_ips, a_ips = torch_run["images_per_second"], level["images_per_second"]
t_cpu_ips = torch_run["images_per_cpu_second"]
a_cpu_ips = timed * batch / alloy_cpu if alloy_cpu > 0 else None
record = {
    "record": "round", "round": round_, "rounds": rounds, "threads": threads,
    "batch_size": batch, "steps": steps, "timed_steps": timed, "torch": torch_run["torch"],
    "pytorch_images_per_second": t_ips, "alloy_images_per_second": a_ips,
    "ratio_alloy_over_pytorch": a_ips / t_ips,
    "pytorch_cpu_seconds": torch_run["cpu_seconds"], "alloy_cpu_seconds": alloy_cpu,
    "pytorch_images_per_cpu_second": t_cpu_ips, "alloy_images_per_cpu_second": a_cpu_ips,
    "cpu_ratio_alloy_over_pytorch": ratio(a_cpu_ips, t_cpu_ips),
}
with open(records, "a") as file:
    print(json.dumps(record), file=file)
digits = {"ratio_alloy_over_pytorch": 3, "cpu_ratio_alloy_over_pytorch": 3,
          "pytorch_cpu_seconds": 3, "alloy_cpu_seconds": 3}
print(json.dumps({key: round(value, digits.get(key, 2)) if isinstance(value, float) else value
                  for key, value in record.items()}), flush=True)
print(f"round {round_}/{rounds}, batch {batch}: PyTorch {t_ips:.1f} images/s, Alloy {a_ips:.1f} "
      f"images/s, Alloy/PyTorch {a_ips / t_ips:.2f}x (per CPU second: {fmt(t_cpu_ips)} vs "
      f"{fmt(a_cpu_ips)}, {fmt(ratio(a_cpu_ips, t_cpu_ips), 2, 'x')})", file=sys.stderr)
EOF
  done
done

summarize_rounds batch_size "threads batch_size rounds steps timed_steps torch" 1
