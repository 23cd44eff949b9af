#!/usr/bin/env bash
# tools/results/figures.py (ctest: tools_results_figures_test, label unit): every figure the
# README shows has a raw record.
#  1. The tree: README.md's generated blocks match docs/results/*.jsonl (render.py --check), no
#     measurement-looking text stands outside them, and the docs hold no history (figures.py).
#  2. A copy of the README with a figure pasted by hand - outside the blocks (each kind: ratio,
#     time, rate, accuracy, percentage, size, FLOP rate), or inside one - fails; so do a commit
#     hash and a date in the docs; settings written as the README writes them (3x3, 28x28x1,
#     --ema-decay 0.999, 25 MiB, 2^16) pass.
#  3. The README stays a manual (at most 450 lines) and PERFORMANCE.md an analysis (700).
#
#   tests/tools/results_figures_test.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
figures=$root/tools/results/figures.py
render=$root/tools/results/render.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "results_figures_test: FAILED: $*"
  failures=$((failures + 1))
}

# 1. The tree.
python3 "$render" --check >"$work/out" 2>&1 || fail "render.py --check: $(cat "$work/out")"
python3 "$figures" >"$work/out" 2>&1 || fail "figures.py: $(tail -n 6 "$work/out")"

# 2. Figures pasted by hand into a copy of the README.
cp "$root/README.md" "$work/README.md"
figures_on() { python3 "$figures" --readme "$1" --no-default-history "${@:2}" >/dev/null 2>&1; }
figures_on "$work/README.md" || fail "the copy of the README fails before any paste"
while IFS= read -r line; do
  cp "$root/README.md" "$work/pasted.md"
  printf '\n%s\n' "$line" >>"$work/pasted.md"
  status=0
  figures_on "$work/pasted.md" || status=$?
  ((status == 1)) || fail "figures.py passed a pasted '$line' (exit $status)"
done <<'LINES'
Alloy trains LeNet 2.4x faster than PyTorch.
ResNet-18 runs at 162.5 images/s on two cores.
The GPT runs at 3678 tokens/s.
An epoch takes 57.4 s here.
The step is 350 us of device time.
The suite took 11 min on 2 cores.
The recipe ends at 0.8380 test accuracy.
Its validation loss is 1.8964.
LeNet's small products run at 65% of OpenBLAS's.
The activations peak at 454.80 MiB.
ResNet-50 reaches 412 TFLOP/s.
Measured at commit abc1234.
Measured on 2099-01-31.
LINES

# Inside a generated block a figure must come from the records: render.py --check catches it.
python3 - "$work/README.md" <<'PY'
import re
import sys

path = sys.argv[1]
text = open(path).read()
# Changes the first figure with decimals inside the first block that has one.
for match in re.finditer(r"<!-- results:([\w.-]+) -->(.*?)<!-- /results:\1 -->", text, re.S):
    figure = re.search(r"\d\.\d{3}", match.group(2))
    if figure:
        at = match.start(2) + figure.start()
        text = text[:at] + ("1" if text[at] != "1" else "2") + text[at + 1:]
        break
else:
    sys.exit("no block with a figure")
open(path, "w").write(text)
PY
status=0
python3 "$render" --readme "$work/README.md" --check >/dev/null 2>&1 || status=$?
((status == 1)) || fail "render.py --check passed a figure edited inside a block (exit $status)"

# Settings, not measurements, pass.
printf '# t\n\nconv 3x3, images 28x28x1, --ema-decay 0.999, buckets of 25 MiB, 2^16, cuda:0,\n' \
  >"$work/settings.md"
printf 'the last tenth, `--lr 0.2`, 4 heads, 10 epochs, 3 steps, sm_90, x86_64, O0-O3.\n' \
  >>"$work/settings.md"
figures_on "$work/settings.md" || fail "figures.py failed settings: $(python3 "$figures" \
  --readme "$work/settings.md" --no-default-history 2>&1)"

# History in a doc other than the README.
printf 'Measured at 2099-01-31, commit abc1234.\n' >"$work/history.md"
status=0
figures_on "$work/settings.md" --history "$work/history.md" || status=$?
((status == 1)) || fail "figures.py passed history in a doc (exit $status)"
printf '<!-- results:x -->\n' >"$work/unclosed.md"
status=0
figures_on "$work/unclosed.md" || status=$?
((status == 2)) || fail "an unclosed marker: exit $status"

# 3. The documents' lengths.
for limit in "README.md 450" "docs/PERFORMANCE.md 700"; do
  read -r doc most <<<"$limit"
  lines=$(wc -l <"$root/$doc")
  ((lines <= most)) || fail "$doc has $lines lines, more than $most"
done

if ((failures)); then
  echo "results_figures_test: $failures check(s) failed"
  exit 1
fi
echo "results_figures_test: every check passed"
