#!/usr/bin/env bash
# tools/results/render.py (ctest: tools_results_render_test, label unit):
#  1. README.md's results tables match docs/results/*.jsonl (render.py --check): a figure edited
#     by hand, or records appended without rendering, fail here;
#  2. on a made-up README and records: rendering fills the table with each row's median and
#     range and the comparison's ratio; a second run leaves the file byte for byte as it was;
#     --check passes; a figure edited in the table fails --check (exit 1), as does a record
#     appended without rendering; an unclosed marker is an error (exit 2);
#  3. the other kinds of records (paired seeds, validation loss by level and seed, CPU benchmark
#     summaries, alloy mem) render their tables under a header naming the machine, date,
#     commit, command and load and linking the record; records without them show no figure.
#
#   tests/tools/results_render_test.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
render=$root/tools/results/render.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "results_render_test: FAILED: $*"
  failures=$((failures + 1))
}

# 1. The tree's own README.
python3 "$render" --check >"$work/check" 2>&1 || fail "README.md: $(cat "$work/check")"

# 2. A made-up README.
mkdir "$work/results"
printf '# t\n\n<!-- results:gpu_demo -->\nstale\n<!-- /results:gpu_demo -->\n\ntail\n' \
  >"$work/README.md"
python3 - "$work/results/gpu_demo.jsonl" <<'PY'
import json
import sys

common = {"date": "2030-01-01 00:00:00", "commit": "abc", "command": "gpu_vs_pytorch.sh",
          "gpu": "GPU X", "driver": "1", "torch": "2", "torch_cuda": "3", "cudnn": 4}
with open(sys.argv[1], "w") as f:
    for round_, value in ((1, 100), (2, 400), (3, 200)):
        f.write(json.dumps({"record": "row", **common, "row": "pytorch/a", "label": "PyTorch a",
                            "round": round_, "status": "ok", "value": value,
                            "unit": "images/s"}) + "\n")
    f.write(json.dumps({"record": "comparison", **common, "subject": "alloy/O2",
                        "baseline_label": "PyTorch a", "ratio_of_medians": 1.5,
                        "round_ratio_min": 1.25, "round_ratio_max": 1.75, "rounds": 3,
                        "goal": 1.1, "met": True}) + "\n")
PY
run() { python3 "$render" --readme "$work/README.md" --results "$work/results" "$@"; }
run >/dev/null || fail "render exited $?"
grep -q '^| pytorch/a | PyTorch a | 200 images/s | 100-400 | 3 of 3 | ok |$' "$work/README.md" ||
  fail "the row's median and range: $(grep pytorch/a "$work/README.md")"
grep -q '^| alloy/O2 | PyTorch a | \*\*1.50x\*\* | 1.25x-1.75x (3 rounds) | >= 1.1x | yes |$' \
  "$work/README.md" || fail "the comparison: $(grep alloy/O2 "$work/README.md")"
grep -q stale "$work/README.md" && fail "the old table is still there"
grep -q '^tail$' "$work/README.md" || fail "the text after the marker is gone"
cp "$work/README.md" "$work/first"
run >/dev/null || fail "the second render exited $?"
cmp -s "$work/README.md" "$work/first" || fail "a second render changed the file"
run --check >/dev/null 2>&1 || fail "--check after rendering"
sed -i 's/| 200 images\/s |/| 210 images\/s |/' "$work/README.md"
status=0
run --check >/dev/null 2>&1 || status=$?
((status == 1)) || fail "--check passed a figure edited by hand (exit $status)"
cp "$work/first" "$work/README.md"
grep '"round": 3' "$work/results/gpu_demo.jsonl" | sed 's/"round": 3/"round": 4/' >"$work/more"
cat "$work/more" >>"$work/results/gpu_demo.jsonl"
status=0
run --check >/dev/null 2>&1 || status=$?
((status == 1)) || fail "--check passed records appended without rendering (exit $status)"
cmp -s "$work/README.md" "$work/first" || fail "--check wrote the file"
printf '<!-- results:gpu_demo -->\n' >"$work/README.md"
status=0
run >/dev/null 2>&1 || status=$?
((status == 2)) || fail "an unclosed marker: exit $status"

# 3. The other kinds of records, each in a made-up README: the header names the machine, date,
#    commit, command and load and links the record; records without a machine, date or commit
#    show no figure.
rm -rf "$work/kinds" && mkdir -p "$work/kinds"
python3 - "$work/kinds" <<'PY'
import json
import os
import sys

out = sys.argv[1]
stamp = {"machine": "cpu X, 2 cores", "date": "2030-01-02T03:04:05Z", "commit": "abc1234",
         "load": "1.50 1.00 0.50 1/100 1"}


def write(name, records):
    with open(os.path.join(out, name + ".jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


write("seeds", [{"setting": s, "seed": n, "test_acc": a, "command": f"alloy train --seed {n}",
                 **stamp} for s, n, a in (("O0", 1, 0.80), ("O0", 2, 0.82), ("O3", 1, 0.81),
                                           ("O3", 2, 0.84))])
write("runs", [{"record": "run", "level": l, "seed": n, "val_loss": v, "command": "alloy train",
                **stamp} for l, n, v in (("O0", 1, 1.5), ("O0", 2, 1.7), ("O2", 1, 1.25),
                                          ("O2", 2, 1.75))])
write("rounds", [{"record": "summary", "batch_size": b, "rounds": 3, "cpu_rounds": 3,
                  "pytorch_images_per_second_median": 100.0,
                  "alloy_images_per_second_median": 100.0 * r, "ratio_of_medians": r,
                  "round_ratio_min": r - 0.1, "round_ratio_max": r + 0.1,
                  "command": "bench.sh", **stamp} for b, r in ((64, 1.5), (128, 2.0))])
mib = 2 ** 20
write("mem", [{"record": "mem", "opt_level": l, **{f"{c}_bytes": f * mib for c in (
    "parameters", "master_parameters", "gradients", "optimizer_state", "activations",
    "workspace", "data", "peak")}, "images_per_second": 100 * f, "command": "alloy mem",
    **stamp} for l, f in (("O0", 4), ("O2", 2))])
write("bare", [{"record": "summary", "ratio_of_medians": 9.0}])
PY
for kind in seeds runs rounds mem bare; do
  printf '<!-- results:%s -->\n<!-- /results:%s -->\n' "$kind" "$kind"
done >"$work/kinds/README.md"
python3 "$render" --readme "$work/kinds/README.md" --results "$work/kinds" >/dev/null ||
  fail "rendering the other kinds exited $?"
expect() {
  grep -qF -- "$1" "$work/kinds/README.md" || fail "$2: no '$1' in $(cat "$work/kinds/README.md")"
}
expect '2030-01-02 03:04 UTC, commit abc1234, cpu X, 2 cores, load average 1.50' "the header"
expect 'Record: [`seeds.jsonl`](seeds.jsonl).' "the link to the record"
expect '`alloy train` with each run'"'"'s `--seed` (2 runs)' "the seeds' commands"
expect '| O3 | 1-2 (2) | 0.8250 | **+0.0150** (2 seeds) | 0.0071 | [-0.0485, +0.0785] |' \
  "the paired seeds"
expect '| O2 | 1.2500 | 1.7500 | **1.5000** | -0.1000 |' "validation loss by level and seed"
expect '| images per second, batch 128 | 100 | 200 | **2.00x** | 1.90x-2.10x | 3 |' \
  "a summary per batch size"
expect '| activations | 4.00 | 2.00 (0.50x) |' "alloy mem's categories"
expect '| **peak_bytes** | **4.00** | **2.00 (0.50x)** |' "alloy mem's peak"
expect 'names its machine, date and commit: no figure shown' "records without a machine"
grep -q '9.00x' "$work/kinds/README.md" && fail "a record without a machine gave a figure"

if ((failures)); then
  echo "results_render_test: $failures check(s) failed"
  exit 1
fi
echo "results_render_test: every check passed"
