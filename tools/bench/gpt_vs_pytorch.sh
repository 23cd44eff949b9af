#!/usr/bin/env bash
# Trains nanoGPT's CPU shakespeare_char configuration (4 layers, 4 heads, 128 wide, context 64,
# no biases, batch 12, AdamW with warmup, cosine decay and clipping, fp32) with PyTorch and with
# Alloy on the CPU, side by side over several rounds, and prints the training tokens/s of both and
# the ratio Alloy / PyTorch; the records are appended to the results file.
#
#   tools/bench/gpt_vs_pytorch.sh DATA_FILE [--steps N] [--threads N] [--rounds R]
#                                 [--alloy PATH] [--python PATH] [--results FILE] [--keep DIR]
#
# DATA_FILE is the tiny Shakespeare text. Defaults: 200 steps per run, 2 threads for Alloy,
# 3 rounds, build/bin/alloy, /usr/bin/python3 (Debian's python3-torch),
# docs/results/gpt_cpu_vs_pytorch.jsonl. PyTorch trains in tools/bench/gpt_pytorch.py (the same
# model, init, AdamW groups, schedule and text), Alloy with `alloy train --model gpt
# --opt-level O0`, each a whole run from a fresh process. tokens/s is each program's own figure:
# training tokens over the wall time of its training steps, evaluation excluded. PyTorch runs
# with OPENBLAS_NUM_THREADS=1 (its BLAS pool otherwise fights torch's OpenMP threads) at torch
# threads 1 and at --threads, and its faster run of the round counts (pytorch_threads). Alloy
# validates on 1% of the text instead of 10% (--val-fraction 0.01): its whole-split evaluation
# at the end is not timed, but it is in the process's CPU time, which is the second figure:
# training tokens per CPU second of the whole process (start-up, data and evaluation included,
# for both), less sensitive to other load on a shared machine than the wall time.
#
# Rounds: PyTorch first in odd rounds and Alloy first in even ones, so that slow drift in the
# machine's speed hits both alike (see tools/bench/lenet_vs_pytorch.sh). Standard output: one
# JSON line per round ("record": "round"), then the summary ("record": "summary": medians, the
# ratio of the medians, the per-round min and max ratios); the same lines go to the results
# file with the machine, date, commit, command, load and the data file's name, size and sha256
# (tools/results/stamp.py). Standard error: the figures in words.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$here/tools/bench/rounds.sh"
steps=200
threads=2
rounds=3
alloy="$here/build/bin/alloy"
python=/usr/bin/python3
results="$here/docs/results/gpt_cpu_vs_pytorch.jsonl"
keep=""
data=""

while (($#)); do
  case "$1" in
    --steps | --threads | --rounds | --alloy | --python | --results | --keep)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    -*) usage_error "unknown argument '$1'" ;;
    *) [[ -z "$data" ]] || usage_error "one DATA_FILE, not '$data' and '$1'"; data="$1"; shift ;;
  esac
done
[[ -n "$data" ]] || usage_error "DATA_FILE (the tiny Shakespeare text) is missing"
[[ -f "$data" ]] || usage_error "DATA_FILE '$data' is not a file"
steps=$(integer_at_least --steps "$steps" 2)
threads=$(integer_at_least --threads "$threads" 1)
rounds=$(integer_at_least --rounds "$rounds" 1)
command -v "$python" >/dev/null || usage_error "--python '$python' is not a command"
require_alloy
make_out_dir
mkdir -p "$(dirname "$results")"
# The command as typed, for the records (tools/results/stamp.py writes the data file's name).
invocation="tools/bench/gpt_vs_pytorch.sh $data --steps $steps --threads $threads --rounds $rounds"
torch_threads=(1)
((threads == 1)) || torch_threads+=("$threads")

shape=(--n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --steps "$steps"
  --dropout 0 --lr 1e-3 --beta2 0.99 --weight-decay 0.1 --warmup-steps 100 --min-lr 1e-4
  --clip-grad-norm 1)

run_pytorch() {
  local t
  for t in "${torch_threads[@]}"; do
    echo "== round $round/$rounds: PyTorch, $t threads" >&2
    cpu_timed "$out/pytorch-r$round-t$t.cpu" "${pytorch_unpinned[@]}" OPENBLAS_NUM_THREADS=1 \
      "$python" "$here/tools/bench/gpt_pytorch.py" "$data" "${shape[@]}" --bias false \
      --threads "$t" --seed "$round" >"$out/pytorch-r$round-t$t.jsonl"
    cat "$out/pytorch-r$round-t$t.jsonl" >&2
  done
}
run_alloy() {
  echo "== round $round/$rounds: Alloy" >&2
  cpu_timed "$out/alloy-r$round.cpu" "$alloy" train --model gpt --dataset text --data-file "$data" \
    "${shape[@]}" --bias false --optimizer adamw --lr-schedule cosine --threads "$threads" \
    --device cpu --opt-level O0 --val-fraction 0.01 --seed "$round" \
    --log-json "$out/alloy-r$round.jsonl" >&2
}

: >"$out/rounds.jsonl"
for ((round = 1; round <= rounds; round++)); do
  if ((round % 2 == 1)); then
    run_pytorch
    run_alloy
  else
    run_alloy
    run_pytorch
  fi
  "$python" - "$out" "$round" "$rounds" "$threads" "$steps" "${torch_threads[*]}" <<'EOF'
import json
import sys

out, round_, rounds, threads, steps, torch_threads = sys.argv[1:]
round_, rounds, threads, steps = map(int, (round_, rounds, threads, steps))


def end_of(path):
    return next(e for e in map(json.loads, open(path)) if e.get("event") == "end")


tokens = (steps - 1) * 12 * 64  # PyTorch's timed steps; Alloy times all of them
torch_runs = {}
for t in torch_threads.split():
    end = end_of(f"{out}/pytorch-r{round_}-t{t}.jsonl")
    cpu = float(open(f"{out}/pytorch-r{round_}-t{t}.cpu").read())
    torch_runs[int(t)] = (end, cpu)
best = max(torch_runs, key=lambda t: torch_runs[t][0]["tokens_per_second"])
torch_end, torch_cpu = torch_runs[best]
alloy_end = end_of(f"{out}/alloy-r{round_}.jsonl")
alloy_cpu = float(open(f"{out}/alloy-r{round_}.cpu").read())
record = {
    "record": "round", "round": round_, "rounds": rounds, "model": "gpt-shakespeare-cpu",
    "threads": threads, "steps": steps, "torch": torch_end["torch"],
    "pytorch_threads": best,
    "pytorch_tokens_per_second_by_threads": {
        str(t): run[0]["tokens_per_second"] for t, run in torch_runs.items()},
    "pytorch_images_per_second": torch_end["tokens_per_second"],
    "alloy_images_per_second": alloy_end["tokens_per_second"],
    "ratio_alloy_over_pytorch": alloy_end["tokens_per_second"] / torch_end["tokens_per_second"],
    "pytorch_cpu_seconds": torch_cpu, "alloy_cpu_seconds": alloy_cpu,
    "pytorch_images_per_cpu_second": steps * 12 * 64 / torch_cpu if torch_cpu > 0 else None,
    "alloy_images_per_cpu_second": steps * 12 * 64 / alloy_cpu if alloy_cpu > 0 else None,
    "pytorch_train_loss": torch_end["train_loss"],
}
a, t = record["alloy_images_per_cpu_second"], record["pytorch_images_per_cpu_second"]
record["cpu_ratio_alloy_over_pytorch"] = a / t if a and t else None
with open(f"{out}/rounds.jsonl", "a") as file:
    print(json.dumps(record), file=file)
print(json.dumps(record), flush=True)
print(f"round {round_}/{rounds}: PyTorch ({best} threads) {record['pytorch_images_per_second']:.0f} "
      f"tokens/s, Alloy {record['alloy_images_per_second']:.0f} tokens/s, Alloy/PyTorch "
      f"{record['ratio_alloy_over_pytorch']:.2f}x (per CPU second: "
      f"{record['cpu_ratio_alloy_over_pytorch'] or float('nan'):.2f}x)", file=sys.stderr)
EOF
done

# rounds.sh's summary speaks of images; the records' "images" are tokens here.
summarize_rounds "" "model threads steps rounds torch" 0 >"$out/summary.jsonl"
cat "$out/summary.jsonl"
"$python" - "$out/rounds.jsonl" "$out/summary.jsonl" <<'EOF' |
import json
import sys

for path in sys.argv[1:3]:
    for record in map(json.loads, open(path)):
        print(json.dumps({k.replace("images", "tokens"): v for k, v in record.items()}))
EOF
  "$python" "$here/tools/results/stamp.py" --command "$invocation" --data-file "$data" \
    >>"$results"
