#!/usr/bin/env bash
# tools/gpu/kernel_times.py on a made-up Nsight Compute CSV (ctest: tools_kernel_times_test):
#  1. the table: each kernel's calls, total and mean, the time per step over the `sgd` launches;
#  2. --step: the launches after the first sgd through the second, in order, each with its time
#     (two calls of one kernel told apart), and their sum;
#  3. refusals: --step without --per (exit 2), --step with one sgd launch in the window, a CSV
#     without time rows, an unknown time unit (exit 1).
#
#   tests/tools/kernel_times_test.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
script=$root/tools/gpu/kernel_times.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "kernel_times_test: $*" >&2; exit 1; }

# ncu prints its own lines before the CSV; each launch has one gpu__time_duration.sum row.
csv() {
  echo '==PROF== Connected to process 1'
  echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
  local id=0
  while (($#)); do
    echo "\"$id\",\"$1\",\"gpu__time_duration.sum\",\"$2\",\"$3\""
    echo "\"$id\",\"$1\",\"other__metric\",\"ns\",\"1\""
    id=$((id + 1))
    shift 3
  done
}
csv bias_grad_kernel ns 5000 sgd_kernel ns 6000 \
  conv_kernel ns 20000 bias_grad_kernel ns 12000 bias_grad_kernel usecond 3.5 sgd_kernel ns 6500 \
  conv_kernel ns 21000 >"$work/ncu.csv"

table=$(python3 "$script" "$work/ncu.csv" --per sgd)
grep -q '^7 launches of 3 kernels, 74.0 us of device time; 2 steps (.sgd.): 37.0 us and 3.5 launches a step$' \
  <<<"$table" || fail "wrong header: $table"
grep -Eq '^ +3 +20.5 +6.83 +27.7% +10.2  bias_grad_kernel$' <<<"$table" ||
  fail "wrong bias_grad row: $table"
grep -q 'one step' <<<"$table" && fail "a step listed without --step: $table"

step=$(python3 "$script" "$work/ncu.csv" --per sgd --step)
listed=$(sed -n '/^one step/,$p' <<<"$step")
expected='one step, 4 launches in order, 42.0 us:
  #       us  kernel
  1    20.00  conv_kernel
  2    12.00  bias_grad_kernel
  3     3.50  bias_grad_kernel
  4     6.50  sgd_kernel'
[[ $listed == "$expected" ]] || fail "wrong step listing:
$listed
expected:
$expected"

status=0
python3 "$script" "$work/ncu.csv" --step >/dev/null 2>&1 || status=$?
((status == 2)) || fail "--step without --per exited $status, not 2"
csv conv_kernel ns 1000 sgd_kernel ns 2000 conv_kernel ns 1000 >"$work/one.csv"
status=0
message=$(python3 "$script" "$work/one.csv" --per sgd --step 2>&1) || status=$?
((status == 1)) && grep -q "two 'sgd' launches" <<<"$message" ||
  fail "one sgd launch: exit $status, '$message'"
echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"' >"$work/empty.csv"
status=0
python3 "$script" "$work/empty.csv" >/dev/null 2>&1 || status=$?
((status == 1)) || fail "a CSV without time rows exited $status, not 1"
csv conv_kernel fortnight 1 >"$work/unit.csv"
status=0
message=$(python3 "$script" "$work/unit.csv" 2>&1) || status=$?
((status == 1)) && grep -q "unknown time unit 'fortnight'" <<<"$message" ||
  fail "an unknown unit: exit $status, '$message'"
echo "kernel_times_test: passed"
