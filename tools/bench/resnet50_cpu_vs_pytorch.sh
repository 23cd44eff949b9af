#!/usr/bin/env bash
# Times fp32 ResNet-50 training steps at 224x224 (3 channels, 1000 classes, ImageNet
# normalisation, SGD momentum 0.9) on the CPU with PyTorch (torchvision.models.resnet50, in
# tools/bench/resnet50_pytorch.py) and with Alloy (`alloy mem --model resnet50 --opt-levels O0`),
# side by side in rounds, with the same thread count, batch size and steps, as
# tools/bench/resnet18_vs_pytorch.sh does for resnet18: each a fresh process, PyTorch first in
# odd rounds and Alloy first in even ones, so that drift in the machine's speed hits both alike.
# Both time the steps after the first on one synthetic batch, without data loading.
#
#   tools/bench/resnet50_cpu_vs_pytorch.sh [--batch-size 16] [--size 224] [--steps 4]
#                                          [--threads 2] [--rounds 3] [--records FILE]
#                                          [--alloy PATH] [--python PATH]
#
# Records (one JSON line per round, then a summary with the medians, the ratio of the medians,
# Alloy over PyTorch, and the smallest and largest per-round ratio) go to standard output and are
# appended to --records, default docs/results/resnet50_cpu.jsonl, with the machine, date, commit,
# command and load (tools/results/stamp.py).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$here/tools/bench/rounds.sh"
batch=16
size=224
steps=4
threads=2
rounds=3
records="$here/docs/results/resnet50_cpu.jsonl"
alloy="$here/build/bin/alloy"
python=/usr/bin/python3
keep=""

while (($#)); do
  case "$1" in
    --batch-size | --size | --steps | --threads | --rounds | --records | --alloy | --python)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --batch-size) batch="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --records) records="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
batch=$(integer_at_least --batch-size "$batch" 1)
size=$(integer_at_least --size "$size" 64)
steps=$(integer_at_least --steps "$steps" 2)
threads=$(integer_at_least --threads "$threads" 1)
rounds=$(integer_at_least --rounds "$rounds" 1)
require_alloy
make_out_dir
mkdir -p "$(dirname "$records")"
# The command as typed, for the records (tools/results/stamp.py).
invocation="tools/bench/resnet50_cpu_vs_pytorch.sh --batch-size $batch --size $size --steps"
invocation+=" $steps --threads $threads --rounds $rounds"

echo "resnet50, fp32 SGD steps on the CPU: ${size}x$size, batch $batch, $steps steps per run," \
  "$threads threads, $rounds rounds of PyTorch and Alloy side by side" >&2
: >"$out/rounds.jsonl"
for ((round = 1; round <= rounds; round++)); do
  torch_run=("${pytorch_unpinned[@]}" "$python" "$here/tools/bench/resnet50_pytorch.py"
    --batch-size "$batch" --size "$size" --steps "$steps" --threads "$threads")
  alloy_run=("$alloy" mem --model resnet50 --device cpu --opt-levels O0 --batch-size "$batch"
    --image-size "$size" --channels 3 --num-classes 1000 --normalize imagenet --steps "$steps"
    --threads "$threads" --json "$out/alloy-$round.json")
  if ((round % 2 == 1)); then
    "${torch_run[@]}" >"$out/pytorch-$round.json"
    "${alloy_run[@]}" >>"$out/alloy.log" 2>&1 || { cat "$out/alloy.log" >&2; exit 1; }
  else
    "${alloy_run[@]}" >>"$out/alloy.log" 2>&1 || { cat "$out/alloy.log" >&2; exit 1; }
    "${torch_run[@]}" >"$out/pytorch-$round.json"
  fi
  "$python" - "$out/pytorch-$round.json" "$out/alloy-$round.json" "$round" "$rounds" \
    "$threads" "$batch" "$size" "$steps" <<'EOF_PY' | tee -a "$out/rounds.jsonl"
import json
import sys

torch_run = json.loads(open(sys.argv[1]).readline())
level = json.loads(open(sys.argv[2]).readline())
round_, rounds, threads, batch, size, steps = map(int, sys.argv[3:9])
t, a = torch_run["images_per_second"], level["images_per_second"]
print(json.dumps({"record": "round", "model": "resnet50", "round": round_, "rounds": rounds,
                  "threads": threads, "batch_size": batch, "image_size": size, "steps": steps,
                  "torch": torch_run["torch"], "pytorch_images_per_second": t,
                  "alloy_images_per_second": a, "ratio_alloy_over_pytorch": a / t,
                  "alloy_peak_bytes": level["peak_bytes"]}))
print(f"round {round_}/{rounds}: PyTorch {t:.2f} images/s, Alloy {a:.2f} images/s, "
      f"Alloy/PyTorch {a / t:.2f}x", file=sys.stderr)
EOF_PY
done
"$python" - "$out/rounds.jsonl" <<'EOF_PY' |
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
for row in rows:
    print(json.dumps(row))
t = statistics.median(r["pytorch_images_per_second"] for r in rows)
a = statistics.median(r["alloy_images_per_second"] for r in rows)
ratios = [r["ratio_alloy_over_pytorch"] for r in rows]
print(json.dumps({"record": "summary", "model": "resnet50", "rounds": len(rows),
                  "threads": rows[0]["threads"], "batch_size": rows[0]["batch_size"],
                  "image_size": rows[0]["image_size"], "pytorch_images_per_second_median": t,
                  "alloy_images_per_second_median": a, "ratio_of_medians": round(a / t, 3),
                  "round_ratio_min": round(min(ratios), 3),
                  "round_ratio_max": round(max(ratios), 3)}))
print(f"medians of {len(rows)} rounds: PyTorch {t:.2f} images/s, Alloy {a:.2f} images/s, "
      f"Alloy/PyTorch {a / t:.2f}x (rounds {min(ratios):.2f}x-{max(ratios):.2f}x)",
      file=sys.stderr)
EOF_PY
  "$python" "$here/tools/results/stamp.py" --command "$invocation" | tee -a "$records"
