#!/usr/bin/env bash
# tools/bench/gpu_vs_pytorch.sh rehearsed on the CPU with its lenet and ffn parts, so that its
# runs, parsing, tables and summary are tested on machines without a GPU (ctest:
# tools_gpu_vs_pytorch_test, label e2e):
#  1. ALLOY_BENCH_PARTS=lenet,ffn (the default --parts it sets), 2 rounds: exit 0; the summary
#     lines of LeNet and of ffn's three comparisons, each over 2 rounds with its goal, their
#     speedups equal to those computed here from the runs' own epoch events; the host-wait
#     rows of Alloy's ffn runs; gpu_bench.md's ffn rows; the commands of the ffn runs (PyTorch
#     without --amp in the rehearsal, Alloy at O0 and O2);
#  2. the same output read as if it came from a GPU: the ffn "AMP" run's end line says amp
#     false, so gpu_bench.py calls it unreadable and exits 1;
#  3. an unknown part in ALLOY_BENCH_PARTS, and lenet_pytorch.py --amp on the CPU: usage
#     errors (exit 2).
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
ALLOY_BENCH_PARTS=lenet,ffn "$script" --device cpu --alloy "$alloy" --python "$python" \
  --rounds 2 --out "$work/out" >"$work/stdout" 2>"$work/stderr" || status=$?
if ((status != 0)); then
  fail "the rehearsal exited $status"
  tail -n 20 "$work/stderr"
fi
"$python" - "$work/out" "$work/stdout" <<'EOF' || fail "the summary (above)"
import json
import os
import statistics
import sys

out, stdout = sys.argv[1], sys.argv[2]
records = [json.loads(line) for line in open(stdout) if line.startswith("{")]
summary = {r["comparison"]: r for r in records if r["record"] == "summary"}
errors = []
facts = json.load(open(os.path.join(out, "facts.json")))
if facts["parts"] != "lenet,ffn":
    errors.append(f"facts.json parts {facts['parts']!r}, expected 'lenet,ffn'")


def seconds_per_epoch(run, round_):
    """The mean epoch_seconds of a run's epochs after the first, from its own log."""
    epochs = [json.loads(line) for line in open(os.path.join(out, f"{run}-r{round_}.jsonl"))
              if '"event": "epoch"' in line or '"event":"epoch"' in line]
    if len(epochs) != 3:
        raise ValueError(f"{run} round {round_}: {len(epochs)} epoch events, expected 3")
    return statistics.mean(e["epoch_seconds"] for e in epochs[1:])


expected = {  # comparison: (baseline run, subject run, goal)
    "lenet_seconds_per_epoch": ("lenet-pytorch", "lenet-alloy", 5.0),
    "ffn_fp32_seconds_per_epoch": ("ffn-pytorch-fp32", "ffn-alloy-O0", 1.0),
    "ffn_amp_seconds_per_epoch": ("ffn-pytorch-amp", "ffn-alloy-O2", 1.2),
    "ffn_alloy_o2_over_o0": ("ffn-alloy-O0", "ffn-alloy-O2", None),
}
for key, (baseline, subject, goal) in expected.items():
    s = summary.get(key)
    if s is None:
        errors.append(f"no summary line for {key}")
        continue
    b = statistics.median(seconds_per_epoch(baseline, r) for r in (1, 2))
    a = statistics.median(seconds_per_epoch(subject, r) for r in (1, 2))
    if s["rounds"] != 2 or s["goal"] != goal or s["unit"] != "s/epoch":
        errors.append(f"{key}: rounds {s['rounds']}, goal {s['goal']}, unit {s['unit']}")
    elif abs(s["speedup_of_medians"] - b / a) > 1e-9 * b / a:
        errors.append(f"{key}: speedup {s['speedup_of_medians']}, computed {b / a}")
extra = set(summary) - set(expected) - {"host_round_trips_lenet-alloy",
                                        "host_round_trips_ffn-alloy-O0",
                                        "host_round_trips_ffn-alloy-O2"}
if extra:
    errors.append(f"summary lines of parts that did not run: {sorted(extra)}")
for run, level, goal in (("ffn-alloy-O0", "O0", None), ("ffn-alloy-O2", "O2", 0)):
    row = summary.get(f"host_round_trips_{run}")
    # 2 rounds x 2 timed epochs x 2 steps (16 train images, batch 8)
    if row is None or row["opt_level"] != level or row["steps"] != 8 or row["goal"] != goal:
        errors.append(f"host-wait row of {run}: {row}")
    # On the CPU nothing waits: no back-pressure (the stager never waits), and the overflow
    # monitor's poll of the O2 run is a queued download, read without a wait.
    elif row["host_waits_per_step"] != 0 or row["backpressure_waits_per_step"] != 0 \
            or row["other_host_waits_per_step"] != 0:
        errors.append(f"host waits in the CPU rehearsal's {run}: {row}")
markdown = open(os.path.join(out, "gpu_bench.md")).read()
for text in ("| ffn b8 fp32, seconds per epoch (training only) |",
             "| ffn b8 mixed precision, seconds per epoch (training only) | PyTorch fp32 "
             "(rehearsal stand-in for AMP",
             "| ffn b8, Alloy O2 over Alloy O0, seconds per epoch |", "| ffn-alloy-O2 | O2 |",
             "| of which back-pressure | other host waits / step (the goal's) |"):
    if text not in markdown:
        errors.append(f"gpu_bench.md lacks {text!r}")
commands = {}
for line in open(os.path.join(out, "commands.txt")):
    name, command = line.split(": ", 1)
    commands[name.split()[-1]] = command.split()
checks = {"ffn-pytorch-fp32": (("--model", "ffn"),), "ffn-pytorch-amp": (("--model", "ffn"),),
          "ffn-alloy-O0": (("--model", "ffn"), ("--opt-level", "O0")),
          "ffn-alloy-O2": (("--model", "ffn"), ("--opt-level", "O2"))}
for name, pairs in checks.items():
    words = commands.get(name, [])
    if "--amp" in words or any(flag not in words or words[words.index(flag) + 1] != value
                               for flag, value in pairs):
        errors.append(f"{name}'s command: {' '.join(words) or 'missing'}")
for error in errors:
    print(f"gpu_vs_pytorch_test: {error}")
sys.exit(1 if errors else 0)
EOF

# 2. Read as a GPU run: AMP is expected of ffn-pytorch-amp there.
if [[ -f $work/out/facts.json ]]; then
  "$python" -c 'import json, sys
path = sys.argv[1]
facts = json.load(open(path))
facts["mode"] = "cuda"
json.dump(facts, open(path, "w"))' "$work/out/facts.json"
  status=0
  "$python" "$root/tools/bench/gpu_bench.py" summarize "$work/out" --final >/dev/null \
    2>"$work/gpu-stderr" || status=$?
  ((status == 1)) || fail "gpu_bench.py summarize read a fp32 run as AMP (exit $status)"
  grep -q "| ffn-pytorch-amp | ok | .*expected ffn, amp True" "$work/out/gpu_bench.md" ||
    fail "gpu_bench.md does not say why ffn-pytorch-amp is unreadable"
fi

# 3. Usage errors.
status=0
ALLOY_BENCH_PARTS=ffn,bogus "$script" --device cpu --alloy "$alloy" --python "$python" \
  >"$work/usage" 2>&1 || status=$?
if ((status != 2)) || ! grep -q "ALLOY_BENCH_PARTS" "$work/usage"; then
  fail "ALLOY_BENCH_PARTS=ffn,bogus: exit $status, $(head -n 1 "$work/usage")"
fi
status=0
"$python" "$root/tools/bench/lenet_pytorch.py" --device cpu --amp >"$work/usage" 2>&1 ||
  status=$?
if ((status != 2)) || ! grep -q -- "--amp needs --device cuda" "$work/usage"; then
  fail "lenet_pytorch.py --amp --device cpu: exit $status, $(head -n 1 "$work/usage")"
fi

if ((failures)); then
  echo "gpu_vs_pytorch_test: $failures check(s) failed"
  exit 1
fi
echo "gpu_vs_pytorch_test: every check passed"
