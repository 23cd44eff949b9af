#!/usr/bin/env bash
# Times fp32 resnet18 training steps (28x28x1 images, SGD momentum 0.9) with PyTorch on the CPU
# and then with Alloy on the CPU, in one go, with the same thread count, batch sizes and steps,
# and prints both throughputs and the ratio Alloy / PyTorch per batch size.
#
#   tools/bench/resnet18_vs_pytorch.sh [--batch-sizes 64,128] [--steps N] [--threads N]
#                                      [--alloy PATH] [--python PATH] [--keep DIR]
#
# Defaults: batch 64 and 128, 5 steps per batch size, every core this process may use,
# build/bin/alloy and /usr/bin/python3 (Debian's python3-torch; `tools/setup.sh --with-torch`
# installs it). Both time the same step on one synthetic batch, without data loading:
# PyTorch in tools/bench/resnet18_pytorch.py, Alloy as `alloy mem --opt-levels O0` does.
# images/s counts the steps after the first over their wall time. Run it on an otherwise idle
# machine: both runs share its cores with anything else that runs. As a figure less sensitive to
# other load it also prints images per CPU second over the same steps: PyTorch's from its own
# process times; Alloy's from the CPU time of `alloy mem --steps N` minus that of
# `alloy mem --steps 1` (the setup and the first step).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
batch_sizes=64,128
steps=5
threads="$(nproc)"
alloy="$here/build/bin/alloy"
python=/usr/bin/python3
keep=""

while (($#)); do
  case "$1" in
    --batch-sizes) batch_sizes="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "resnet18_vs_pytorch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

[[ -x "$alloy" ]] || { echo "resnet18_vs_pytorch.sh: $alloy not found: run tools/setup.sh" >&2; exit 1; }
((steps >= 2)) || { echo "resnet18_vs_pytorch.sh: --steps must be at least 2" >&2; exit 2; }
out="${keep:-$(mktemp -d)}"
mkdir -p "$out"
[[ -n "$keep" ]] || trap 'rm -rf "$out"' EXIT

echo "resnet18, fp32 SGD steps on the CPU: batch $batch_sizes, $steps steps each, $threads threads" >&2

# Runs "$@" with its output in $out/alloy.log and prints its user + system CPU seconds. Called
# in a command substitution: the subshell running this function reaps the command, so its
# children's times are read, by its $BASHPID taken before any nested substitution.
cpu_seconds_of() {
  local self=$BASHPID before after
  before=$(awk '{print $16 + $17}' "/proc/$self/stat")  # reaped children's user + system
  "$@" >>"$out/alloy.log" 2>&1 || { echo "resnet18_vs_pytorch.sh: $* failed:" >&2; cat "$out/alloy.log" >&2; exit 1; }
  after=$(awk '{print $16 + $17}' "/proc/$self/stat")
  awk -v a="$after" -v b="$before" -v hz="$(getconf CLK_TCK)" 'BEGIN {print (a - b) / hz}'
}

echo "== PyTorch" >&2
"$python" "$here/tools/bench/resnet18_pytorch.py" --batch-sizes "$batch_sizes" --steps "$steps" \
  --threads "$threads" >"$out/pytorch.jsonl"
cat "$out/pytorch.jsonl" >&2

echo "== Alloy" >&2
: >"$out/alloy.jsonl"
for batch in ${batch_sizes//,/ }; do
  mem=("$alloy" mem --model resnet18 --device cpu --opt-levels O0 --batch-size "$batch"
    --threads "$threads")
  setup_cpu=$(cpu_seconds_of "${mem[@]}" --steps 1 --json "$out/alloy-$batch-setup.json")
  total_cpu=$(cpu_seconds_of "${mem[@]}" --steps "$steps" --json "$out/alloy-$batch.json")
  "$python" - "$out/alloy-$batch.json" "$batch" "$steps" "$total_cpu" "$setup_cpu" \
    >>"$out/alloy.jsonl" <<'EOF'
import json
import sys

level = json.loads(open(sys.argv[1]).readline())
batch, steps = int(sys.argv[2]), int(sys.argv[3])
cpu = float(sys.argv[4]) - float(sys.argv[5])
print(json.dumps({"framework": "alloy", "batch_size": batch, "timed_steps": steps - 1,
                  "images_per_second": level["images_per_second"], "cpu_seconds": cpu,
                  "images_per_cpu_second": (steps - 1) * batch / cpu}))
EOF
  tail -n 1 "$out/alloy.jsonl" >&2
done

"$python" - "$out/pytorch.jsonl" "$out/alloy.jsonl" "$threads" <<'EOF'
import json
import sys

torch_runs = {r["batch_size"]: r for r in map(json.loads, open(sys.argv[1]))}
alloy_runs = {r["batch_size"]: r for r in map(json.loads, open(sys.argv[2]))}
for batch, a in alloy_runs.items():
    t = torch_runs[batch]
    ratio = a["images_per_second"] / t["images_per_second"]
    cpu_ratio = a["images_per_cpu_second"] / t["images_per_cpu_second"]
    print(json.dumps({
        "threads": int(sys.argv[3]), "batch_size": batch, "timed_steps": a["timed_steps"],
        "torch": t["torch"],
        "pytorch_images_per_second": round(t["images_per_second"], 1),
        "alloy_images_per_second": round(a["images_per_second"], 1),
        "ratio_alloy_over_pytorch": round(ratio, 3),
        "pytorch_images_per_cpu_second": round(t["images_per_cpu_second"], 1),
        "alloy_images_per_cpu_second": round(a["images_per_cpu_second"], 1),
        "cpu_ratio_alloy_over_pytorch": round(cpu_ratio, 3),
    }))
    print(f"batch {batch}: PyTorch {t['images_per_second']:.1f} images/s, Alloy "
          f"{a['images_per_second']:.1f} images/s, Alloy/PyTorch {ratio:.2f}x (per CPU second: "
          f"{t['images_per_cpu_second']:.1f} vs {a['images_per_cpu_second']:.1f}, "
          f"{cpu_ratio:.2f}x)", file=sys.stderr)
EOF
