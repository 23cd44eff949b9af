#!/usr/bin/env bash
# tools/stats/paired_seeds.py on made-up runs (ctest: tools_paired_seeds_test):
#  1. --no-run over a record of two settings and a baseline, four seeds each (one seed of the
#     baseline recorded twice: the last line counts; a seed outside --seeds ignored): the paired
#     differences, their mean, sample sd and 95% t-interval (t with 3 degrees of freedom), in
#     the table and the JSON lines;
#  2. running: a stand-in alloy that writes a JSON log; each (setting, seed) is run once and
#     appended to the record with its test_acc and params_digest, and a rerun runs nothing;
#  3. refusals: a setting sharing one seed with the baseline, a failing run (exit 1), bad
#     --seeds and a --baseline that is not a setting (exit 2).
#
#   tests/tools/paired_seeds_test.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
script=$root/tools/stats/paired_seeds.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "paired_seeds_test: $*" >&2; exit 1; }
command -v python3 >/dev/null || { echo "paired_seeds_test: no python3: skipped"; exit 77; }

record() { echo "{\"seed\": $1, \"setting\": \"$2\", \"test_acc\": $3, \"params_digest\": \"x\"}"; }
{
  record 1 base 0.80; record 2 base 0.81; record 3 base 0.79; record 4 base 0.70
  record 4 base 0.82  # recorded again: this one counts
  record 9 base 0.10  # not among --seeds
  record 1 up 0.81; record 2 up 0.83; record 3 up 0.82; record 4 up 0.86
  record 1 same 0.80; record 2 same 0.80; record 3 same 0.80; record 4 same 0.80
} >"$work/record.jsonl"
out=$(python3 "$script" --no-run --record "$work/record.jsonl" --baseline base --seeds 1-4)
# up - base = 0.01, 0.02, 0.03, 0.04: mean 0.025, sd 0.012910, half-width 3.182 * sd / 2.
python3 - "$out" <<'PY' || fail "wrong summary: $out"
import json, math, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
up = next(l for l in lines if l["setting"] == "up")
assert up["n"] == 4 and up["seeds"] == [1, 2, 3, 4], up
assert all(abs(a - b) < 1e-12 for a, b in zip(up["differences"], [0.01, 0.02, 0.03, 0.04])), up
assert abs(up["mean"] - 0.025) < 1e-12 and abs(up["sd"] - math.sqrt(5 / 3) / 100) < 1e-12, up
half = 3.182 * math.sqrt(5 / 3) / 100 / 2
assert abs(up["ci95"][0] - (0.025 - half)) < 1e-12 and abs(up["ci95"][1] - (0.025 + half)) < 1e-12
same = next(l for l in lines if l["setting"] == "same")
assert abs(same["mean"] - (-0.005)) < 1e-12 and same["baseline"] == "base", same
PY
grep -Eq '^ +up - base: n 4  mean \+0.0250  sd 0.0129  95% \[\+0.0045, \+0.0455\]' <<<"$out" ||
  fail "wrong table row: $out"

# A stand-in alloy: test_acc from the seed and the presence of --flag.
cat >"$work/alloy" <<'SH'
#!/usr/bin/env bash
echo "$*" >>"$(dirname "$0")/calls"
seed=0 flag=0 log=
while (($#)); do
  case "$1" in --seed) seed=$2; shift ;; --log-json) log=$2; shift ;; --flag) flag=1 ;;
    --crash) echo "alloy: made to fail" >&2; exit 1 ;; esac
  shift
done
echo "{\"event\":\"start\",\"opt_level\":\"O3\"}" >"$log"
echo "{\"event\":\"end\",\"test_acc\":0.$((50 + seed + 3 * flag)),\"params_digest\":\"d$seed$flag\"}" >>"$log"
SH
chmod +x "$work/alloy"
run=(python3 "$script" --alloy "$work/alloy" --common "train --model lenet" --seeds 1-3
  --setting plain= --setting flagged=--flag --baseline plain --record "$work/runs/new.jsonl")
out=$("${run[@]}" 2>/dev/null)
[[ $(wc -l <"$work/runs/new.jsonl") == 6 ]] || fail "not six records: $(cat "$work/runs/new.jsonl")"
[[ $(wc -l <"$work/calls") == 6 ]] || fail "not six runs"
grep -q -- '--model lenet --flag --seed 2 --log-json' "$work/calls" || fail "wrong arguments"
grep -q '"params_digest": "d21"' "$work/runs/new.jsonl" || fail "no digest recorded"
grep -q '"commit": ' "$work/runs/new.jsonl" && grep -q '"machine": ' "$work/runs/new.jsonl" ||
  fail "no commit or machine recorded"
grep -q '"setting": "flagged", "baseline": "plain"' <<<"$out" &&
  grep -q '"mean": 0.03' <<<"$out" || fail "wrong summary of the runs: $out"
"${run[@]}" >/dev/null 2>&1
[[ $(wc -l <"$work/calls") == 6 ]] || fail "a rerun ran again"

status=0
message=$(python3 "$script" --no-run --record "$work/record.jsonl" --baseline base --seeds 1 2>&1) ||
  status=$?
((status == 1)) && grep -q 'share 1 seed' <<<"$message" || fail "one seed: $status '$message'"
status=0
message=$(python3 "$script" --alloy "$work/alloy" --setting a=--crash --setting b= --baseline b \
  --seeds 1 --record "$work/crash.jsonl" 2>&1) || status=$?
((status == 1)) && grep -q 'made to fail' <<<"$message" || fail "a failing run: $status '$message'"
status=0
python3 "$script" --no-run --record "$work/record.jsonl" --baseline base --seeds 3-x \
  >/dev/null 2>&1 || status=$?
((status == 2)) || fail "bad --seeds exited $status, not 2"
status=0
python3 "$script" --alloy "$work/alloy" --setting a= --baseline b --record "$work/x.jsonl" \
  >/dev/null 2>&1 || status=$?
((status == 2)) || fail "a --baseline that is no setting exited $status, not 2"
echo "paired_seeds_test: passed"
