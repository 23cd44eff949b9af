#!/usr/bin/env bash
# Trains nanoGPT's CPU configuration of its shakespeare_char example (4 layers, 4 heads, 128
# wide, context 64, batch 12, 2000 steps of AdamW with warmup and cosine decay) with Alloy on
# the CPU, at each opt level listed and each seed, and appends one JSON record per run to the
# results file: the machine, the date, the commit, the load, the command, the data file's name,
# size and sha256 (tools/results/stamp.py: never its path), the seed, the validation loss over
# every token of the held-out split and the training tokens/s.
#
#   tools/bench/shakespeare_cpu.sh DATA_FILE [--seeds 1,1337] [--levels O0,O2-bf16,O2-fp16]
#                                  [--steps N] [--threads N] [--alloy PATH]
#                                  [--results FILE] [--keep DIR]
#
# DATA_FILE is the tiny Shakespeare text (nanoGPT's input.txt, about 1.1 MB). Defaults: seeds 1
# and 1337; O0, O2 with bf16 and O2 with fp16; 2000 steps; 2 threads; build/bin/alloy;
# docs/results/gpt_shakespeare_cpu.jsonl. A level is O0..O3, optionally -bf16 or -fp16 (the
# --half-dtype). After the runs it prints, for each level, the mean validation loss over the
# seeds and its difference from the first level's.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$here/tools/bench/rounds.sh"
seeds=1,1337
levels=O0,O2-bf16,O2-fp16
steps=2000
threads=2
alloy="$here/build/bin/alloy"
results="$here/docs/results/gpt_shakespeare_cpu.jsonl"
keep=""
python=python3
data=""

while (($#)); do
  case "$1" in
    --seeds | --levels | --steps | --threads | --alloy | --results | --keep)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --seeds) seeds="$2"; shift 2 ;;
    --levels) levels="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    -*) usage_error "unknown argument '$1'" ;;
    *) [[ -z "$data" ]] || usage_error "one DATA_FILE, not '$data' and '$1'"; data="$1"; shift ;;
  esac
done
[[ -n "$data" ]] || usage_error "DATA_FILE (the tiny Shakespeare text) is missing"
[[ -f "$data" ]] || usage_error "DATA_FILE '$data' is not a file"
steps=$(integer_at_least --steps "$steps" 1)
threads=$(integer_at_least --threads "$threads" 1)
IFS=, read -r -a seed_list <<<"$seeds"
IFS=, read -r -a level_list <<<"$levels"
for level in "${level_list[@]}"; do
  [[ "$level" =~ ^O[0-3](-bf16|-fp16)?$ ]] || usage_error "--levels: '$level' is not O0..O3[-bf16|-fp16]"
done
require_alloy
make_out_dir
mkdir -p "$(dirname "$results")"

recipe=(--model gpt --dataset text --data-file "$data" --bias false --n-layer 4 --n-head 4
  --n-embd 128 --block-size 64 --batch-size 12 --steps "$steps" --dropout 0 --optimizer adamw
  --lr 1e-3 --beta2 0.99 --weight-decay 0.1 --warmup-steps 100 --lr-schedule cosine
  --min-lr 1e-4 --clip-grad-norm 1 --threads "$threads" --device cpu)

: >"$out/runs.jsonl"
for level in "${level_list[@]}"; do
  flags=(--opt-level "${level%%-*}")
  [[ "$level" != *-* ]] || flags+=(--half-dtype "${level#*-}")
  for seed in "${seed_list[@]}"; do
    log="$out/$level-seed$seed.jsonl"
    command=("$alloy" train "${recipe[@]}" "${flags[@]}" --seed "$seed" --log-json "$log")
    echo "== $level, seed $seed" >&2
    "${command[@]}" >&2
    # The command as a user types it: alloy's name, not its path, and no log file.
    shown=(alloy train "${recipe[@]}" "${flags[@]}" --seed "$seed")
    "$python" - "$log" "$level" "$seed" <<'EOF' |
import json
import sys

path, level, seed = sys.argv[1:]
end = next(e for e in map(json.loads, open(path)) if e.get("event") == "end")
print(json.dumps({
    "record": "run", "level": level, "seed": int(seed),
    "steps": end["step"], "val_loss": end["val_loss"],
    "tokens_per_second": end["tokens_per_second"], "params_digest": end["params_digest"]}))
EOF
      "$python" "$here/tools/results/stamp.py" --command "${shown[*]}" --data-file "$data" \
        >>"$out/runs.jsonl"
    tail -n 1 "$out/runs.jsonl" | tee -a "$results"
  done
done

"$python" - "$out/runs.jsonl" <<'EOF'
import json
import statistics
import sys

runs = list(map(json.loads, open(sys.argv[1])))
levels = list(dict.fromkeys(r["level"] for r in runs))
means = {l: statistics.mean(r["val_loss"] for r in runs if r["level"] == l) for l in levels}
for level in levels:
    print(f"{level}: mean validation loss {means[level]:.4f} over seeds "
          + ", ".join(str(r["seed"]) for r in runs if r["level"] == level)
          + f" ({means[level] - means[levels[0]]:+.4f} from {levels[0]})", file=sys.stderr)
EOF
