#!/usr/bin/env bash
# Trains the reference LeNet recipe (Fashion-MNIST, SGD lr 0.2, batch 256, fp32) with PyTorch
# on the CPU and then with Alloy on the CPU, one after the other, with the same thread count and
# epochs, and prints the training throughput of both and the ratio Alloy / PyTorch.
#
#   tools/bench/lenet_vs_pytorch.sh [--epochs N] [--threads N] [--alloy PATH] [--data-dir DIR]
#                                   [--python PATH] [--keep DIR]
#
# Defaults: 2 epochs, every core this process may use, build/bin/alloy, Debian's data set and
# /usr/bin/python3 (Debian's python3-torch; `tools/setup.sh --with-torch` installs it).
# images/s is training images over the wall time spent in training steps, test evaluation
# excluded, for both programs. Run it on an otherwise idle machine: both runs share its cores
# with anything else that runs. As a figure less sensitive to other load it also prints training
# images per CPU second: the same images over the whole process's user + system CPU time (data
# loading and test evaluation included, for both).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
epochs=2
threads="$(nproc)"
alloy="$here/build/bin/alloy"
data_dir=/usr/share/datasets/fashion-mnist
python=/usr/bin/python3
keep=""

while (($#)); do
  case "$1" in
    --epochs) epochs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --data-dir) data_dir="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "lenet_vs_pytorch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

[[ -x "$alloy" ]] || { echo "lenet_vs_pytorch.sh: $alloy not found: run tools/setup.sh" >&2; exit 1; }
out="${keep:-$(mktemp -d)}"
mkdir -p "$out"
[[ -n "$keep" ]] || trap 'rm -rf "$out"' EXIT

echo "LeNet, Fashion-MNIST, SGD lr 0.2, batch 256, fp32 on the CPU: $epochs epochs, $threads threads" >&2

# Runs "$@" and writes its user + system CPU seconds to the file $cpu_file.
cpu_timed() {
  local before after
  before=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)  # this shell's children so far
  "$@"
  after=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
  awk -v a="$after" -v b="$before" -v hz="$(getconf CLK_TCK)" 'BEGIN {print (a - b) / hz}' \
    >"$cpu_file"
}

echo "== PyTorch" >&2
cpu_file="$out/pytorch.cpu"
cpu_timed "$python" "$here/tools/bench/lenet_pytorch.py" --epochs "$epochs" \
  --threads "$threads" --data-dir "$data_dir" >"$out/pytorch.jsonl"
cat "$out/pytorch.jsonl" >&2

echo "== Alloy" >&2
cpu_file="$out/alloy.cpu"
cpu_timed "$alloy" train --model lenet --device cpu --opt-level O0 --epochs "$epochs" \
  --batch-size 256 --lr 0.2 --seed 1 --threads "$threads" --data-dir "$data_dir" \
  --log-json "$out/alloy.jsonl" >&2

"$python" - "$out/pytorch.jsonl" "$out/alloy.jsonl" "$threads" "$epochs" \
  "$(cat "$out/pytorch.cpu")" "$(cat "$out/alloy.cpu")" <<'EOF'
import json
import sys


def epochs_of(path):
    with open(path) as f:
        return [e for e in map(json.loads, f) if e.get("event") == "epoch"]


def throughput(events):
    # Total images over total training seconds: an epoch's images = its images/s x seconds.
    images = sum(e["images_per_second"] * e["epoch_seconds"] for e in events)
    return images / sum(e["epoch_seconds"] for e in events)


def images(events):
    return sum(e["images_per_second"] * e["epoch_seconds"] for e in events)


torch_epochs, alloy_epochs = epochs_of(sys.argv[1]), epochs_of(sys.argv[2])
torch_ips, alloy_ips = throughput(torch_epochs), throughput(alloy_epochs)
torch_cpu, alloy_cpu = float(sys.argv[5]), float(sys.argv[6])
torch_ipc, alloy_ipc = images(torch_epochs) / torch_cpu, images(alloy_epochs) / alloy_cpu
print(json.dumps({
    "threads": int(sys.argv[3]), "epochs": int(sys.argv[4]),
    "pytorch_images_per_second": round(torch_ips, 1),
    "alloy_images_per_second": round(alloy_ips, 1),
    "ratio_alloy_over_pytorch": round(alloy_ips / torch_ips, 3),
    "pytorch_cpu_seconds": round(torch_cpu, 1), "alloy_cpu_seconds": round(alloy_cpu, 1),
    "pytorch_images_per_cpu_second": round(torch_ipc, 1),
    "alloy_images_per_cpu_second": round(alloy_ipc, 1),
    "cpu_ratio_alloy_over_pytorch": round(alloy_ipc / torch_ipc, 3),
    "pytorch_test_acc": torch_epochs[-1]["test_acc"],
    "alloy_test_acc": alloy_epochs[-1]["test_acc"],
}))
print(f"PyTorch {torch_ips:.0f} images/s, Alloy {alloy_ips:.0f} images/s, "
      f"Alloy/PyTorch {alloy_ips / torch_ips:.2f}x "
      f"(per CPU second: {torch_ipc:.0f} vs {alloy_ipc:.0f}, {alloy_ipc / torch_ipc:.2f}x)",
      file=sys.stderr)
EOF
