#!/usr/bin/env bash
# Times fp32 resnet18 training steps (28x28x1 images, SGD momentum 0.9) with PyTorch on the CPU
# and with Alloy on the CPU, side by side in one go, with the same thread count, batch sizes and
# steps, over several rounds, and prints both throughputs and the ratio Alloy / PyTorch per batch
# size.
#
#   tools/bench/resnet18_vs_pytorch.sh [--batch-sizes 64,128] [--steps N] [--threads N]
#                                      [--rounds R] [--alloy PATH] [--python PATH] [--keep DIR]
#                                      [--recompute none|blocks|both] [--results FILE]
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
# Recompute: --recompute blocks runs both frameworks with activation recomputation, each basic
# block's forward run again in backward instead of keeping its activations (Alloy:
# `alloy mem --recompute blocks`; PyTorch: torch.utils.checkpoint around each block, see
# resnet18_pytorch.py). --recompute both runs, in each round and for each batch size, the pair
# without recompute and the pair with it (none first in odd rounds, blocks first in even ones,
# so that drift hits both settings alike), summarises each setting on its own (the summaries in
# words under a "recompute none:" and a "recompute blocks:" line), then prints one JSON line per
# batch size ("record": "overhead", "recompute": "blocks") with the cost of recomputation in each
# framework: images/s with recompute over without (pytorch_blocks_over_none,
# alloy_blocks_over_none: the ratio of the medians; ..._round_min and ..._round_max: the
# smallest and largest ratio within one round), the same per CPU second
# (pytorch_cpu_blocks_over_none, ...), and the median memory figure of each setting
# (alloy_peak_bytes_none and _blocks: `alloy mem`'s allocator peak_bytes;
# pytorch_max_rss_bytes_none and _blocks: the PyTorch process's max RSS, interpreter and
# libraries included, so comparable only with itself). Default none: no recompute, and Alloy
# runs without the flag.
#
# Standard output: one JSON line per round and batch size ("record": "round"), as each round
# ends, then one per batch size ("record": "summary") with the medians, the ratio of medians and
# the per-round min and max ratios. Every record names its "recompute" setting; round records
# also have pytorch_max_rss_bytes and alloy_peak_bytes as above. Standard error: the same in
# words. A CPU-time figure is null (n/a) where the measured CPU time of the timed steps is not
# positive (clock ticks are 10 ms: use more steps); medians and ratios of that figure then cover
# the other rounds.
#
# Records: the round and summary lines are also appended to --results FILE (default
# docs/results/resnet18_cpu_vs_pytorch.jsonl) with the machine, date, commit, command and load
# (tools/results/stamp.py), for tools/results/render.py's README tables.
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
recompute=none
results="$here/docs/results/resnet18_cpu_vs_pytorch.jsonl"

while (($#)); do
  case "$1" in
    --batch-sizes | --steps | --threads | --rounds | --alloy | --python | --keep | --recompute | \
      --results)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --batch-sizes) batch_sizes="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --recompute) recompute="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
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
case "$recompute" in
  none | blocks) settings=("$recompute") ;;
  both) settings=(none blocks) ;;
  *) usage_error "--recompute must be none, blocks or both, not '$recompute'" ;;
esac
require_alloy
make_out_dir

recompute_words=""  # the setting in words, unless only the default runs
[[ "$recompute" == none ]] || recompute_words=", recompute $recompute"
echo "resnet18, fp32 SGD steps on the CPU: batch $batch_sizes, $steps steps per run," \
  "$threads threads, $rounds rounds of PyTorch and Alloy side by side$recompute_words" >&2

# The folder of the round records of recompute setting $1: $out, or with --recompute both a
# folder per setting, so that each is summarised on its own.
records_dir() {
  if [[ "$recompute" == both ]]; then echo "$out/recompute-$1"; else echo "$out"; fi
}

# Runs "$@" with its output appended to $out/alloy.log; if it fails, prints the log and exits.
logged() {
  "$@" >>"$out/alloy.log" 2>&1 || { echo "resnet18_vs_pytorch.sh: $* failed:" >&2; cat "$out/alloy.log" >&2; exit 1; }
}

for setting in "${settings[@]}"; do
  mkdir -p "$(records_dir "$setting")"
  : >"$(records_dir "$setting")/rounds.jsonl"
done
for ((round = 1; round <= rounds; round++)); do
  for batch in "${batches[@]}"; do
    settings_in_order=("${settings[@]}")  # with both: none first in odd rounds, blocks in even
    ((round % 2 == 1 || ${#settings[@]} == 1)) || settings_in_order=(blocks none)
    for setting in "${settings_in_order[@]}"; do
      tag="r$round-b$batch"
      [[ "$setting" == none ]] || tag="$tag-recompute"
      words=""
      [[ "$recompute" == none ]] || words=", recompute $setting"
      torch_bench=("${pytorch_unpinned[@]}" "$python" "$here/tools/bench/resnet18_pytorch.py"
        --batch-sizes "$batch"
        --steps "$steps" --threads "$threads" --recompute "$setting")
      mem=("$alloy" mem --model resnet18 --device cpu --opt-levels O0 --batch-size "$batch"
        --threads "$threads")
      [[ "$setting" == none ]] || mem+=(--recompute "$setting")
      # The two timed runs next to each other, PyTorch's first in odd rounds and Alloy's first
      # in even ones, so drift within a round tilts neither way; Alloy's setup run, only
      # subtracted, after both.
      if ((round % 2 == 1)); then
        "${torch_bench[@]}" >"$out/pytorch-$tag.json"
        cpu_timed "$out/alloy-$tag.cpu" logged "${mem[@]}" --steps "$steps" \
          --json "$out/alloy-$tag.json"
      else
        cpu_timed "$out/alloy-$tag.cpu" logged "${mem[@]}" --steps "$steps" \
          --json "$out/alloy-$tag.json"
        "${torch_bench[@]}" >"$out/pytorch-$tag.json"
      fi
      cpu_timed "$out/alloy-$tag-setup.cpu" logged "${mem[@]}" --steps 1 \
        --json "$out/alloy-$tag-setup.json"
      "$python" - "$out/pytorch-$tag.json" "$out/alloy-$tag.json" \
        "$(cat "$out/alloy-$tag.cpu")" "$(cat "$out/alloy-$tag-setup.cpu")" "$round" "$rounds" \
        "$batch" "$steps" "$threads" "$(records_dir "$setting")/rounds.jsonl" "$setting" \
        "$words" <<'EOF'
import json
import sys

torch_run = json.loads(open(sys.argv[1]).readline())
level = json.loads(open(sys.argv[2]).readline())
alloy_cpu = float(sys.argv[3]) - float(sys.argv[4])
round_, rounds, batch, steps, threads = map(int, sys.argv[5:10])
records = sys.argv[10]  # full precision, for the summary; standard output gets rounded figures
recompute, words = sys.argv[11], sys.argv[12]
timed = steps - 1
assert torch_run["batch_size"] == batch and torch_run["timed_steps"] == timed, torch_run
assert torch_run["recompute"] == recompute, torch_run
# An alloy without --recompute writes no "recompute" key, and does not recompute.
assert level.get("recompute", "none") == recompute, \
    f"{sys.argv[2]} says recompute {level.get('recompute', 'none')}, not {recompute}"


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
    "pytorch_blas_core": torch_run.get("blas_core"),
    "recompute": recompute,
    "pytorch_images_per_second": t_ips, "alloy_images_per_second": a_ips,
    "ratio_alloy_over_pytorch": a_ips / t_ips,
    "pytorch_cpu_seconds": torch_run["cpu_seconds"], "alloy_cpu_seconds": alloy_cpu,
    "pytorch_images_per_cpu_second": t_cpu_ips, "alloy_images_per_cpu_second": a_cpu_ips,
    "cpu_ratio_alloy_over_pytorch": ratio(a_cpu_ips, t_cpu_ips),
    "pytorch_max_rss_bytes": torch_run["max_rss_bytes"], "alloy_peak_bytes": level["peak_bytes"],
}
with open(records, "a") as file:
    print(json.dumps(record), file=file)
digits = {"ratio_alloy_over_pytorch": 3, "cpu_ratio_alloy_over_pytorch": 3,
          "pytorch_cpu_seconds": 3, "alloy_cpu_seconds": 3}
print(json.dumps({key: round(value, digits.get(key, 2)) if isinstance(value, float) else value
                  for key, value in record.items()}), flush=True)
print(f"round {round_}/{rounds}, batch {batch}{words}: PyTorch {t_ips:.1f} images/s, Alloy "
      f"{a_ips:.1f} images/s, Alloy/PyTorch {a_ips / t_ips:.2f}x (per CPU second: "
      f"{fmt(t_cpu_ips)} vs {fmt(a_cpu_ips)}, {fmt(ratio(a_cpu_ips, t_cpu_ips), 2, 'x')})",
      file=sys.stderr)
EOF
    done
  done
done

for setting in "${settings[@]}"; do
  [[ "$recompute" != both ]] || echo "recompute $setting:" >&2
  (out=$(records_dir "$setting")
    summarize_rounds batch_size "threads batch_size rounds steps timed_steps torch recompute" 1 |
      tee "$out/summaries.jsonl")
  save_records "$results" "tools/bench/resnet18_vs_pytorch.sh --batch-sizes $batch_sizes --steps \
$steps --threads $threads --rounds $rounds --recompute $recompute" \
    "$(records_dir "$setting")/rounds.jsonl" "$(records_dir "$setting")/summaries.jsonl"
done
[[ "$recompute" == both ]] || exit 0

# The cost of recomputation, per batch size, from the round records of both settings.
"$python" - "$(records_dir none)/rounds.jsonl" "$(records_dir blocks)/rounds.jsonl" <<'EOF'
import json
import statistics
import sys


def by_round(path):
    """One setting's round records, by (batch size, round)."""
    return {(r["batch_size"], r["round"]): r for r in map(json.loads, open(path))}


def cost(pairs, key):
    """Median with recompute over median without, and the smallest and largest ratio within a
    round, over the rounds where both settings measured the figure."""
    both = [(n[key], b[key]) for n, b in pairs if n[key] is not None and b[key] is not None]
    if not both:
        return None, None, None
    ratios = [b / n for n, b in both]
    median = statistics.median(b for _, b in both) / statistics.median(n for n, _ in both)
    return round(median, 3), round(min(ratios), 3), round(max(ratios), 3)


none, blocks = by_round(sys.argv[1]), by_round(sys.argv[2])
memory = {"alloy_peak_bytes": "Alloy allocator peak",
          "pytorch_max_rss_bytes": "PyTorch process max RSS"}
for batch in dict.fromkeys(batch for batch, _ in none):  # in the order measured
    pairs = [(none[key], blocks[key]) for key in none if key[0] == batch]
    record = {"record": "overhead", "batch_size": batch, "recompute": "blocks",
              "rounds": len(pairs)}
    words = []
    for framework, name in (("pytorch", "PyTorch"), ("alloy", "Alloy")):
        wall = cost(pairs, f"{framework}_images_per_second")
        cpu = cost(pairs, f"{framework}_images_per_cpu_second")
        for prefix, figures in (("", wall), ("cpu_", cpu)):
            for suffix, value in zip(("", "_round_min", "_round_max"), figures):
                record[f"{framework}_{prefix}blocks_over_none{suffix}"] = value
        cpu_words = "n/a" if cpu[0] is None else f"{cpu[0]:.2f}x"
        words.append(f"{name} {wall[0]:.2f}x, per round {wall[1]:.2f}x-{wall[2]:.2f}x (per CPU "
                     f"second {cpu_words})")
    for key in memory:
        for setting, runs in (("none", [n for n, _ in pairs]), ("blocks", [b for _, b in pairs])):
            record[f"{key}_{setting}"] = round(statistics.median(r[key] for r in runs))
    print(json.dumps(record))
    mib = 1 << 20
    memory_words = ", ".join(
        f"{name} {record[f'{key}_none'] / mib:.1f} -> {record[f'{key}_blocks'] / mib:.1f} MiB "
        f"({record[f'{key}_blocks'] / record[f'{key}_none']:.2f}x)" for key, name in memory.items())
    print(f"batch {batch}, recompute blocks over none, medians of {len(pairs)} rounds: images/s "
          + "; ".join(words) + f"; memory: {memory_words}", file=sys.stderr)
EOF
