#!/usr/bin/env bash
# One device call of tools/bench/gpu_vs_pytorch.sh (Alloy against PyTorch at its defaults and at
# its best) within a time budget, everything it writes kept under OUTDIR in at most 4 files (a
# device call returns at most 8):
#   OUTDIR/bench.tar.gz   the whole raw folder (runs.jsonl, every run's log, facts.json,
#                         summary.jsonl, gpu_bench.md, results/gpu_<part>.jsonl), rewritten after
#                         every part of every round, so a call cut short still returns it
#   OUTDIR/gpu_bench.md   the tables, OUTDIR/summary.jsonl their records (at the end)
#   OUTDIR/console.log    the script's progress lines and its exit status
#
#   ALLOY_COMMIT=<commit> bash .gpu/on-device.sh bash tools/gpu/bench_round.sh OUTDIR \
#       [gpu_vs_pytorch.sh options]
#   e.g. ... bench_round.sh "$OUT" --parts resnet50,lenet,resnet18 --rounds 2 --time-budget 330
#
# Defaults: --time-budget 330, $ALLOY or $ALLOY_BUILD/bin/alloy (ALLOY_BUILD: build), --commit
# $ALLOY_COMMIT where set. `gpu_vs_pytorch.sh --dry-run` with the same options estimates the time.
# Then, in the tree: tar -xzf OUTDIR/bench.tar.gz -C /tmp, and for each part
#   cat /tmp/bench/results/gpu_PART.jsonl >>docs/results/gpu_PART.jsonl
# and python3 tools/results/render.py (README.md's tables).
# Exit status: gpu_vs_pytorch.sh's.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: bench_round.sh OUTDIR [gpu_vs_pytorch.sh options]}
shift
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(--out "$work/bench" --tar "$out/bench.tar.gz" --results-dir "$work/bench/results")
[[ " $* " == *" --time-budget "* ]] || flags+=(--time-budget 330)
[[ -z ${ALLOY_COMMIT:-} || " $* " == *" --commit "* ]] || flags+=(--commit "$ALLOY_COMMIT")
[[ -n ${ALLOY:-} || " $* " == *" --alloy "* ]] ||
  flags+=(--alloy "${ALLOY_BUILD:-$here/build}/bin/alloy")
status=0
bash "$here/tools/bench/gpu_vs_pytorch.sh" "${flags[@]}" "$@" >"$out/summary.jsonl" \
  2> >(tee "$out/console.log" >&2) || status=$?
wait
cp "$work/bench/gpu_bench.md" "$out/gpu_bench.md" 2>/dev/null || true
# The results records exist only once the script has ended: pack them too.
if [[ -d $work/bench/results ]]; then
  tar -czf "$out/bench.tar.gz.part" -C "$work" bench &&
    mv "$out/bench.tar.gz.part" "$out/bench.tar.gz"
fi
echo "bench_round.sh: gpu_vs_pytorch.sh exited $status" >>"$out/console.log"
exit "$status"
