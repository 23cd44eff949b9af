#!/usr/bin/env bash
# tools/bench/gpu_vs_pytorch.sh rehearsed on the CPU (ctest: tools_gpu_vs_pytorch_test, label
# e2e), so that its runs, parsing, summaries and records are tested without a GPU:
#  1. --parts lenet, 2 rounds, the fp32 rows, fp16-best, bf16-cuda-graph and Alloy's rows, with
#     --results-dir and --tar: exit 0; fp16-best and the CUDA graph row "skipped" with a reason
#     naming CUDA, never a figure; each comparison's ratio of medians and per-round range equal
#     those computed here from the runs' own outputs (Alloy's epoch events after the first,
#     PyTorch's JSON line); one results line per row and round and one per comparison, each
#     with the machine facts; the tarball holds runs.jsonl;
#  2. --time-budget 1: no run starts, every row "skipped" for the budget, outputs still written;
#  3. --alloy pointing nowhere: Alloy's rows "skipped", PyTorch's measured (a part runs alone);
#  4. usage errors (exit 2): an unknown part, --rounds 0.
#
#   tests/tools/gpu_vs_pytorch_test.sh ALLOY
#
# Exit 77 (ctest: skipped) without a Python that imports torch (python3, else /usr/bin/python3).
set -euo pipefail

alloy=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
script=$root/tools/bench/gpu_vs_pytorch.sh
python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import torch' 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [[ -z $python ]]; then
  echo "gpu_vs_pytorch_test: skipped: no python3 imports torch (install python3-torch)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "gpu_vs_pytorch_test: FAILED: $*"
  failures=$((failures + 1))
}

# 1. The rehearsal.
status=0
"$script" --device cpu --alloy "$alloy" --python "$python" --parts lenet --rounds 2 \
  --rows 'fp32-defaults,fp32-tf32-off,fp16-best,bf16-cuda-graph,alloy/*' --out "$work/out" \
  --results-dir "$work/results" --tar "$work/bench.tar.gz" --commit test-commit \
  >"$work/stdout" 2>"$work/stderr" || status=$?
if ((status != 0)); then
  fail "the rehearsal exited $status"
  tail -n 20 "$work/stderr"
fi
"$python" - "$work" <<'EOF' || fail "the records (above)"
import json
import os
import statistics
import sys
import tarfile

work = sys.argv[1]
out = os.path.join(work, "out")
errors = []


def lines(path):
    return [json.loads(line) for line in open(path) if line.startswith("{")]


runs = lines(os.path.join(out, "runs.jsonl"))
if len(runs) != 2 * 6:
    errors.append(f"{len(runs)} runs, expected 12 (6 rows x 2 rounds)")
figures = {}
for run in runs:
    name, round_ = run["row"], run["round"]
    if name in ("pytorch/fp16-best", "pytorch/bf16-cuda-graph"):
        if run["status"] != "skipped" or "needs CUDA" not in run.get("reason", "") \
                or "value" in run:
            errors.append(f"{name} round {round_}: {run['status']}, {run.get('reason')}")
        continue
    if run["status"] != "ok":
        errors.append(f"{name} round {round_}: {run['status']} ({run.get('reason')})")
        continue
    if run["side"] == "alloy":
        epochs = [e for e in lines(os.path.join(out, run["log_json"]))
                  if e.get("event") == "epoch"]
        figures[name, round_] = statistics.mean(e["images_per_second"] for e in epochs[1:])
    else:
        figures[name, round_] = lines(os.path.join(out, run["stdout"]))[-1]["images_per_second"]
summary = {r["comparison"]: r for r in lines(os.path.join(work, "stdout"))
           if r.get("record") == "comparison"}
expected = {"alloy_O0_vs_fp32_tf32_off": ("alloy/O0", ["pytorch/fp32-tf32-off"], 5.0),
            "alloy_O0_vs_best": ("alloy/O0", ["pytorch/fp32-defaults", "pytorch/fp32-tf32-off"],
                                 None)}
for key, (subject, baselines, goal) in expected.items():
    s = summary.get(key)
    if s is None:
        errors.append(f"no comparison {key}")
        continue
    try:
        pairs = [(figures[subject, n], max(figures[b, n] for b in baselines)) for n in (1, 2)]
    except KeyError as missing:
        errors.append(f"{key}: no figure for {missing}")
        continue
    ratio = statistics.median(p[0] for p in pairs) / statistics.median(p[1] for p in pairs)
    ratios = [a / b for a, b in pairs]
    if s["rounds"] != 2 or s["goal"] != goal or abs(s["ratio_of_medians"] - ratio) > 1e-9 * ratio \
            or abs(s["round_ratio_min"] - min(ratios)) > 1e-9 or s["met"] != (
                None if goal is None else ratio >= goal):
        errors.append(f"{key}: {s}; computed ratio {ratio}, per round {ratios}")
mixed = summary.get("alloy_O2_vs_best_mixed")
if mixed is None or mixed["rounds"] != 0 or mixed["ratio_of_medians"] is not None:
    errors.append(f"alloy_O2_vs_best_mixed compared against skipped rows: {mixed}")
results = lines(os.path.join(work, "results", "gpu_lenet.jsonl"))
row_lines = [r for r in results if r["record"] == "row"]
comparison_lines = [r for r in results if r["record"] == "comparison"]
if len(row_lines) != 12 or len(comparison_lines) != len(summary):
    errors.append(f"results: {len(row_lines)} row lines (expected 12), "
                  f"{len(comparison_lines)} comparison lines (expected {len(summary)})")
for record in results:
    missing = [k for k in ("gpu", "driver", "torch", "torch_cuda", "cudnn", "date", "commit",
                           "command") if k not in record]
    if missing or record["commit"] != "test-commit":
        errors.append(f"a results line lacks {missing} or the commit: {record}")
        break
with tarfile.open(os.path.join(work, "bench.tar.gz")) as tar:
    if not any(name.endswith("/runs.jsonl") for name in tar.getnames()):
        errors.append("the tarball lacks runs.jsonl")
markdown = open(os.path.join(out, "gpu_bench.md")).read()
if "CPU rehearsal: not a measurement" not in markdown or "| lenet | alloy/O0 |" not in markdown:
    errors.append("gpu_bench.md lacks the rehearsal note or the Alloy row")
for error in errors:
    print(f"gpu_vs_pytorch_test: {error}")
sys.exit(1 if errors else 0)
EOF

# 2. A spent budget: nothing starts, everything is still written.
status=0
"$script" --device cpu --alloy "$alloy" --python "$python" --parts resnet18 --rounds 1 \
  --time-budget 1 --out "$work/budget" >/dev/null 2>&1 || status=$?
if ((status != 0)) || [[ ! -s $work/budget/gpu_bench.md ]] ||
  grep -v '"status": "skipped", "reason": "the time budget of 1 s is spent"' \
    "$work/budget/runs.jsonl" | grep -q .; then
  fail "--time-budget 1: exit $status, or a run that started:" \
    "$(head -c 300 "$work/budget/runs.jsonl")"
fi

# 3. No Alloy: the PyTorch rows alone.
status=0
"$script" --device cpu --alloy "$work/no-alloy" --python "$python" --parts lenet --rounds 1 \
  --rows 'fp32-defaults,alloy/O0' --out "$work/alone" >/dev/null 2>&1 || status=$?
if ((status != 0)) ||
  ! grep -q '"row": "pytorch/fp32-defaults".*"status": "ok"' "$work/alone/runs.jsonl" ||
  ! grep -q '"row": "alloy/O0".*"status": "skipped", "reason": "no alloy at' \
    "$work/alone/runs.jsonl"; then
  fail "without alloy: exit $status, $(head -c 600 "$work/alone/runs.jsonl" 2>/dev/null)"
fi

# 4. Usage errors.
for bad in "--parts lenet,bogus" "--rounds 0"; do
  status=0
  # shellcheck disable=SC2086  # the words of $bad are separate arguments
  "$script" --device cpu --alloy "$alloy" --python "$python" $bad >"$work/usage" 2>&1 ||
    status=$?
  ((status == 2)) || fail "$bad: exit $status, $(head -n 1 "$work/usage")"
done

if ((failures)); then
  echo "gpu_vs_pytorch_test: $failures check(s) failed"
  exit 1
fi
echo "gpu_vs_pytorch_test: every check passed"
