#!/usr/bin/env bash
# tools/results/render.py (ctest: tools_results_render_test, label unit):
#  1. README.md's results tables match docs/results/*.jsonl (render.py --check): a figure edited
#     by hand, or records appended without rendering, fail here;
#  2. on a made-up README and records: rendering fills the table with each row's median and
#     range and the comparison's ratio; a second run leaves the file byte for byte as it was;
#     --check passes; a figure edited in the table fails --check (exit 1), as does a record
#     appended without rendering; an unclosed marker is an error (exit 2).
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

if ((failures)); then
  echo "results_render_test: $failures check(s) failed"
  exit 1
fi
echo "results_render_test: every check passed"
