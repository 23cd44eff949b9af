#!/usr/bin/env bash
# Times image loading alone, decode and augment, with Alloy's loader and with torchvision's
# ImageFolder + DataLoader, side by side in rounds: the same folder of 500x375 JPEGs (made here
# with Pillow: noise-free gradients and shapes, quality 90), RandomResizedCrop(224) and a flip,
# the same batch size and the same number of decode threads (Alloy's --loader-threads, the
# DataLoader's workers). Alloy in tools/bench/loader_images.cpp (build target loader_images),
# torchvision in tools/bench/loader_torchvision.py; each times its epochs after a first one.
#
#   tools/bench/loader_vs_torchvision.sh [--images N] [--threads N] [--rounds R]
#                                        [--batch-size N] [--epochs N] [--records FILE]
#                                        [--keep DIR]
#
# Defaults: 512 training images, 2 threads, 3 rounds, batch 64, 2 timed epochs, records appended
# to docs/results/loader_cpu.jsonl (one JSON line per framework and round, then a summary line,
# each with the machine, date, commit, command and load: tools/results/stamp.py);
# the images and per-run outputs in a temporary folder, or in --keep DIR.
# Needs python3-pil and python3-torchvision. Odd rounds run torchvision first, even ones Alloy, so
# that drift in the machine's speed hits both alike. Prints the median images/s of each and the
# ratio of the medians, Alloy over torchvision.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
alloy="$here/build/bin/alloy"  # rounds.sh's helpers read it
keep=""
source "$here/tools/bench/rounds.sh"
images=512
threads=2
rounds=3
batch=64
epochs=2
records="$here/docs/results/loader_cpu.jsonl"
python=/usr/bin/python3
bench="$here/build/bin/loader_images"

while (($#)); do
  case "$1" in
    --images | --threads | --rounds | --batch-size | --epochs | --records | --keep)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --images) images="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --batch-size) batch="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --records) records="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
images=$(integer_at_least --images "$images" 2)
threads=$(integer_at_least --threads "$threads" 1)
rounds=$(integer_at_least --rounds "$rounds" 1)
batch=$(integer_at_least --batch-size "$batch" 1)
epochs=$(integer_at_least --epochs "$epochs" 1)
[[ -x "$bench" ]] || { echo "${0##*/}: $bench not found: cmake --build build --target loader_images" >&2; exit 1; }
make_out_dir
# The command as typed, for the records (tools/results/stamp.py).
invocation="tools/bench/loader_vs_torchvision.sh --images $images --threads $threads --rounds"
invocation+=" $rounds --batch-size $batch --epochs $epochs"

"$python" - "$out/jpegs" "$images" <<'EOF_PY'
import os
import random
import sys

from PIL import Image, ImageDraw

root, count = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
for split, n in (("train", count), ("val", max(2, count // 8))):
    for i in range(n):
        folder = os.path.join(root, split, f"class{i % 4}")
        os.makedirs(folder, exist_ok=True)
        image = Image.linear_gradient("L").resize((500, 375)).convert("RGB")
        draw = ImageDraw.Draw(image)
        for _ in range(12):
            x, y = rng.randrange(500), rng.randrange(375)
            draw.ellipse((x, y, x + rng.randrange(20, 200), y + rng.randrange(20, 150)),
                         fill=tuple(rng.randrange(256) for _ in range(3)))
        image.save(os.path.join(folder, f"{i:05d}.jpg"), quality=90)
EOF_PY

echo "loader: $images 500x375 JPEGs, RandomResizedCrop(224) + flip, batch $batch, $threads" \
  "threads, $epochs timed epochs, $rounds rounds" >&2
mkdir -p "$(dirname "$records")"
: >"$out/rounds.jsonl"
for ((round = 1; round <= rounds; round++)); do
  alloy_run=("$bench" "$out/jpegs" --threads "$threads" --batch-size "$batch" --epochs "$epochs")
  torch_run=("${pytorch_unpinned[@]}" "$python" "$here/tools/bench/loader_torchvision.py"
    "$out/jpegs" --workers "$threads" --batch-size "$batch" --epochs "$epochs")
  if ((round % 2 == 1)); then
    t=$("${torch_run[@]}"); a=$("${alloy_run[@]}")
  else
    a=$("${alloy_run[@]}"); t=$("${torch_run[@]}")
  fi
  for line in "$t" "$a"; do
    echo "$line" | "$python" -c 'import json,sys; r=json.loads(sys.stdin.read()); r.update(record="round", round=int(sys.argv[1]), source_images="500x375 jpeg q90"); print(json.dumps(r))' "$round" | tee -a "$out/rounds.jsonl"
  done
done
"$python" - "$out/rounds.jsonl" <<'EOF_PY' |
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
for row in rows:
    print(json.dumps(row))
median = {f: statistics.median(r["images_per_second"] for r in rows if r["framework"] == f)
          for f in ("alloy", "torchvision")}
ratios = []
for n in sorted({r["round"] for r in rows}):
    pair = {r["framework"]: r["images_per_second"] for r in rows if r["round"] == n}
    ratios.append(pair["alloy"] / pair["torchvision"])
summary = {"record": "summary", "rounds": len(ratios), "threads": rows[0]["threads"],
           "alloy_images_per_second_median": median["alloy"],
           "torchvision_images_per_second_median": median["torchvision"],
           "ratio_of_medians": round(median["alloy"] / median["torchvision"], 3),
           "round_ratio_min": round(min(ratios), 3), "round_ratio_max": round(max(ratios), 3)}
print(json.dumps(summary))
print(f"Alloy {median['alloy']:.1f} images/s, torchvision {median['torchvision']:.1f} images/s: "
      f"{summary['ratio_of_medians']:.2f}x (rounds {summary['round_ratio_min']:.2f}x-"
      f"{summary['round_ratio_max']:.2f}x)", file=sys.stderr)
EOF_PY
  "$python" "$here/tools/results/stamp.py" --command "$invocation" | tee -a "$records"
