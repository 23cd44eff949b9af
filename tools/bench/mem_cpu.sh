#!/usr/bin/env bash
# Runs `alloy mem` (peak bytes per memory category at each opt level) and appends its JSON, one
# line per opt level ("record": "mem"), to a results file with the machine, date, commit, command
# and load (tools/results/stamp.py), for tools/results/render.py's README tables.
#
#   tools/bench/mem_cpu.sh [--model lenet] [--batch-size 256] [--image-size N] [--threads 2]
#                          [--steps 3] [--alloy PATH] [--results FILE]
#
# Defaults: LeNet at batch 256, alloy mem's image size, 2 threads, 3 steps, build/bin/alloy,
# docs/results/mem_<model>_cpu.jsonl (mem_<model>_<size>_cpu.jsonl with --image-size). The bytes are the allocator's own accounting and do not
# depend on the machine's load; the images/s beside them do.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$here/tools/bench/rounds.sh"
model=lenet
batch=256
threads=2
steps=3
size=""
alloy="$here/build/bin/alloy"
results=""
keep=""
python=python3

while (($#)); do
  case "$1" in
    --model | --batch-size | --image-size | --threads | --steps | --alloy | --results)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --model) model="$2"; shift 2 ;;
    --batch-size) batch="$2"; shift 2 ;;
    --image-size) size="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
[[ "$model" =~ ^[a-z0-9_-]+$ ]] || usage_error "--model '$model' is not a model name"
batch=$(integer_at_least --batch-size "$batch" 1)
threads=$(integer_at_least --threads "$threads" 1)
steps=$(integer_at_least --steps "$steps" 2)
[[ -z "$size" ]] || size=$(integer_at_least --image-size "$size" 1)
results="${results:-$here/docs/results/mem_${model}${size:+_$size}_cpu.jsonl}"
require_alloy
make_out_dir
mkdir -p "$(dirname "$results")"

flags=(--model "$model" --batch-size "$batch" ${size:+--image-size "$size"} --device cpu
  --threads "$threads" --steps "$steps")
"$alloy" mem "${flags[@]}" --json "$out/mem.jsonl" >&2
"$python" -c '
import json, sys
for line in open(sys.argv[1]):
    record = json.loads(line)
    print(json.dumps({"record": "mem", **record}))
' "$out/mem.jsonl" |
  "$python" "$here/tools/results/stamp.py" --command "alloy mem ${flags[*]}" | tee -a "$results"
