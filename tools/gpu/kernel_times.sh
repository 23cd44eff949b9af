#!/usr/bin/env bash
# Where a GPU run's device time goes, kernel by kernel: runs COMMAND under Nsight Compute (ncu),
# times launches SKIP+1 .. SKIP+COUNT (graph replays' kernels one by one; skip the set-up, the
# eager warm-up steps and the capture), writes ncu's CSV to OUT and prints tools/gpu/
# kernel_times.py's table. The clocks are not locked and the caches not flushed, so each
# kernel's time is as training sees it, less the launch gaps between kernels.
#
#   tools/gpu/kernel_times.sh --out FILE.csv [--skip N] [--count M] [--per KERNEL [--step]] -- COMMAND...
#
# --per names (a part of) a kernel that runs once per step: the table adds the time per step;
# --step then also lists one step's launches in order, each with its time.
# Defaults: --skip 3000, --count 300. Needs ncu on the PATH or in /opt/nvidia or CUDA's bin.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage_error() { echo "kernel_times.sh: $*" >&2; exit 2; }
out="" skip=3000 count=300 per=() step=()
while (($#)); do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --per) per=(--per "$2"); shift 2 ;;
    --step) step=(--step); shift ;;
    --) shift; break ;;
    *) usage_error "unknown option '$1' (then -- COMMAND...)" ;;
  esac
done
[[ -n $out ]] || usage_error "--out FILE.csv is required"
(($#)) || usage_error "no COMMAND after --"
[[ $skip =~ ^[0-9]+$ && $count =~ ^[1-9][0-9]*$ ]] || usage_error "--skip and --count take counts"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null |
  tail -n 1 || true)
[[ -n $ncu ]] || { echo "kernel_times.sh: no ncu (Nsight Compute) on this machine" >&2; exit 77; }
# The command's own output goes to OUT.log; ncu's, the CSV included, to OUT.
"$ncu" --metrics gpu__time_duration.sum --csv --print-units base --print-kernel-base function \
  --clock-control none --cache-control none --launch-skip "$skip" --launch-count "$count" \
  --log-file "$out" "$@" >"$out.log" 2>&1 ||
  { echo "kernel_times.sh: ncu or the command failed; the end of $out and $out.log:" >&2
    tail -n 5 "$out" "$out.log" >&2; exit 1; }
python3 "$here/kernel_times.py" "$out" "${per[@]}" "${step[@]}"
