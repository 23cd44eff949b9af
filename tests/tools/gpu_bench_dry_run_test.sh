#!/usr/bin/env bash
# tools/bench/gpu_vs_pytorch.sh --dry-run (ctest: tools_gpu_bench_dry_run_test, label unit; no
# GPU, no torch): the rows it would run, one a line, cover every setting the benchmark promises
# (cudnn.benchmark on and off, PyTorch's TF32 default and TF32 off, channels-last and NCHW, fused
# optimizers, fp16 autocast + GradScaler and bf16 autocast, torch.compile max-autotune and
# reduce-overhead, a CUDA graph, GPT-2's padded vocabulary, Alloy's levels), each part has
# PyTorch and Alloy rows and a device-seconds estimate, names and labels are unique, and a part
# alone lists only its own rows; and the summaries of made-up resnet50 runs (below).
#
#   tests/tools/gpu_bench_dry_run_test.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
script=$root/tools/bench/gpu_vs_pytorch.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
"$script" --dry-run --parts lenet,resnet18,resnet50,gpt2 >"$work/all" 2>&1 || status=$?
if ((status != 0)); then
  echo "gpu_bench_dry_run_test: FAILED: --dry-run exited $status"
  cat "$work/all"
  exit 1
fi
"$script" --dry-run --parts gpt2 >"$work/gpt2" 2>&1 || status=$?
if ((status != 0)); then
  echo "gpu_bench_dry_run_test: FAILED: --dry-run --parts gpt2 exited $status"
  exit 1
fi
python3 - "$work/all" "$work/gpt2" <<'PY'
import re
import sys

errors = []
text = open(sys.argv[1]).read()
rows = [line for line in text.splitlines() if re.match(r"^\w+/(pytorch|alloy)/\S+: ", line)]
names = [line.split(": ", 1)[0] for line in rows]
labels = [line.split(": ", 1)[1].rsplit(" (tier", 1)[0] for line in rows]
if len(set(names)) != len(names):
    errors.append(f"row names repeat: {sorted(n for n in names if names.count(n) > 1)}")
for part in ("lenet", "resnet18", "resnet50", "gpt2"):
    mine = [l for n, l in zip(names, labels) if n.startswith(part + "/")]
    if len(set(mine)) != len(mine):
        errors.append(f"{part}: labels repeat")
    for side in ("pytorch", "alloy"):
        if not any(n.startswith(f"{part}/{side}/") for n in names):
            errors.append(f"{part}: no {side} row")
    if not re.search(rf"^estimate {part}: ~\d+ device s per round", text, re.M):
        errors.append(f"{part}: no estimate line")
required = {
    "cudnn.benchmark on": 3, "cudnn.benchmark off": 3,
    "TF32 PyTorch default (cuDNN conv TF32, matmul highest)": 3, "TF32 off (conv and matmul)": 3,
    "channels-last": 3, "NCHW": 3, "SGD fused": 3, "AdamW fused": 1, "SGD default (foreach)": 3,
    "fp16 autocast + GradScaler": 4, "bf16 autocast, no scaler": 4,
    "torch.compile mode max-autotune": 4, "torch.compile mode reduce-overhead": 3,
    "torch.compile mode default": 1, "hand-captured CUDA graph of the whole step": 3,
    "vocab 50304": 1, "batch 256": 3, "batch 16": 1,
    "Alloy --opt-level O0 --allow-tf32": 2, "Alloy --opt-level O2 --half-dtype bf16": 3,
    "Alloy --opt-level O2 --half-dtype fp16": 1,
    "--attention-kernel alloy": 1, "--attention-kernel cudnn": 1,
}
for setting, parts in required.items():
    having = {n.split("/")[0] for n, l in zip(names, labels) if setting in l}
    if len(having) < parts:
        errors.append(f"'{setting}' in {len(having)} parts' rows ({sorted(having)}), "
                      f"expected {parts}")
alone = [line for line in open(sys.argv[2]).read().splitlines() if "/pytorch/" in line
         or "/alloy/" in line]
if not alone or any(not line.startswith("gpt2/") for line in alone):
    errors.append(f"--parts gpt2 listed {alone[:3]}")
for error in errors:
    print(f"gpu_bench_dry_run_test: FAILED: {error}")
print(f"gpu_bench_dry_run_test: {len(rows)} rows, {len(errors)} problem(s)")
sys.exit(1 if errors else 0)
PY

# The summaries on made-up resnet50 runs of a GPU: "best mixed precision" is each round's fastest
# fp16/bf16 row that succeeded (a failed one never counts), the ratio is of the medians, the
# share of the fp16 peak is images/s x 3 x 4.1 GFLOP over 989.4 TFLOP/s.
python3 - "$root/tools/bench" <<'PY'
import statistics
import sys

sys.path.insert(0, sys.argv[1])
import gpu_bench  # noqa: E402

args = gpu_bench.parse(["--parts", "resnet50"])
rows = gpu_bench.plan(args)
figures = {  # round: {row: images/s}; None: the run failed
    1: {"pytorch/fp16-best": 3000, "pytorch/bf16-best": 3100, "pytorch/bf16-cuda-graph": None,
        "pytorch/fp32-defaults": 1000, "alloy/O2": 3500, "alloy/O0-tf32": 900},
    2: {"pytorch/fp16-best": 3300, "pytorch/bf16-best": 2900, "pytorch/bf16-cuda-graph": None,
        "pytorch/fp32-defaults": 1100, "alloy/O2": 3600, "alloy/O0-tf32": 1200},
    3: {"pytorch/fp16-best": 3200, "pytorch/bf16-best": 3000, "pytorch/fp32-defaults": 1050,
        "alloy/O2": 3700, "alloy/O0-tf32": 1000},
}
runs = [{"part": "resnet50", "row": row, "round": n, "status": "failed" if v is None else "ok",
         **({} if v is None else {"value": v})}
        for n, by in figures.items() for row, v in by.items()]
row_summaries, comparisons = gpu_bench.summarize(args, rows, runs)
errors = []
c = {s["comparison"]: s for s in comparisons}
mixed = c["alloy_O2_vs_best_mixed"]
best = [3100, 3300, 3200]
want = statistics.median([3500, 3600, 3700]) / statistics.median(best)
if mixed["rounds"] != 3 or abs(mixed["ratio_of_medians"] - want) > 1e-12 or \
        mixed["baseline_rows"] != ["pytorch/bf16-best", "pytorch/fp16-best", "pytorch/fp16-best"] \
        or mixed["met"] != (want >= 1.1) or abs(mixed["round_ratio_min"] - 3600 / 3300) > 1e-12:
    errors.append(f"best mixed: {mixed}, want ratio {want}")
tf32 = c["alloy_O0_tf32_vs_fp32_defaults"]
if abs(tf32["ratio_of_medians"] - 1000 / 1050) > 1e-12 or tf32["met"] is not False:
    errors.append(f"O0 --allow-tf32 against PyTorch's defaults: {tf32}")
share = {s["row"]: s.get("share_of_fp16_peak") for s in row_summaries}
if abs(share["alloy/O2"] - 3600 * 3 * 4.1e9 / 989.4e12) > 1e-15:
    errors.append(f"share of peak: {share['alloy/O2']}")
for error in errors:
    print(f"gpu_bench_dry_run_test: FAILED: {error}")
print(f"gpu_bench_dry_run_test: summaries, {len(errors)} problem(s)")
sys.exit(1 if errors else 0)
PY
