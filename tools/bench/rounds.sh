# The parts of the Alloy-versus-PyTorch benchmarks (tools/bench/*_vs_pytorch.sh) that are the
# same in each: usage errors, argument checks, the output folder, CPU timing and the summary of
# the rounds. Sourced, after `set -euo pipefail`, by a script whose header comment is its --help;
# the functions read the script's variables alloy, keep, out and python.
# shellcheck shell=bash disable=SC2154

# The prefix of every PyTorch command. Some machines' environments pin OpenBLAS's kernels
# (OPENBLAS_CORETYPE, with OPENBLAS_L2_SIZE) to older ones than the CPU runs: PyTorch runs
# without the pin, on the kernels OpenBLAS picks itself, and its JSON names them (blas_core).
# Alloy keeps a pin it is given, so under one the comparison leans against Alloy.
pytorch_unpinned=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)

# Fails with exit status 2 and a message naming the script.
usage_error() {
  echo "${0##*/}: $* (see --help)" >&2
  exit 2
}

# The script's header comment, from its second line up to `set -euo pipefail`, without the #.
print_help() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

# Prints the integer $2 without leading zeros if it is at least $3 (and below a million), or
# fails with a usage error about option $1.
integer_at_least() {
  if [[ "$2" =~ ^[0-9]{1,6}$ ]] && ((10#$2 >= $3)); then
    echo $((10#$2))
  else
    usage_error "$1 must be an integer from $3 to 999999, not '$2'"
  fi
}

# Fails (exit status 1) unless $alloy is an executable.
require_alloy() {
  [[ -x "$alloy" ]] || { echo "${0##*/}: $alloy not found: run tools/setup.sh" >&2; exit 1; }
}

# Sets out to the --keep folder (created if need be), or to a temporary one removed on exit.
make_out_dir() {
  out="${keep:-$(mktemp -d)}"
  mkdir -p "$out"
  [[ -n "$keep" ]] || trap 'rm -rf "$out"' EXIT
}

# Runs "$@" in this shell and writes the user + system CPU seconds of the processes it started
# (field 16 + 17 of /proc/<pid>/stat: the children this shell has reaped) to the file $1.
# $BASHPID, not $$, so that it also measures inside a subshell; taken before the command
# substitutions, which run in subshells of their own.
cpu_timed() {
  local file=$1 self=$BASHPID before after
  shift
  before=$(awk '{print $16 + $17}' "/proc/$self/stat")
  "$@"
  after=$(awk '{print $16 + $17}' "/proc/$self/stat")
  awk -v a="$after" -v b="$before" -v hz="$(getconf CLK_TCK)" 'BEGIN {print (a - b) / hz}' \
    >"$file"
}

# Prints the summary of the round records in $out/rounds.jsonl: for each value of the record key
# $1 (all records together where $1 is empty), one JSON line ("record": "summary") to standard
# output and the same in words to standard error. The summary starts with the keys listed in $2,
# taken from the first record ("rounds": the number of records), then has the median of each
# framework's images per second and per CPU second over the rounds (with an even number of
# rounds, the mean of the middle two), the ratio of the medians and the smallest and largest
# per-round ratio. Medians are rounded to $3 + 1 decimals in JSON and $3 in words. A figure
# that is null in some rounds covers the others. $4 (optional) is a figure listed for every
# round (4 decimals in words), $5 its name in words.
summarize_rounds() {
  "$python" - "$out/rounds.jsonl" "$@" <<'EOF'
import json
import statistics
import sys

path, group_key, keys, decimals = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4])
listed, listed_words = (sys.argv[5], sys.argv[6]) if len(sys.argv) > 5 else (None, None)
groups = {}
for record in map(json.loads, open(path)):
    groups.setdefault(record[group_key] if group_key else None, []).append(record)


def figure(runs, key):
    """Median of each framework, ratio of the medians, min and max per-round ratio, of the
    rounds where both frameworks measured the figure."""
    both = [r for r in runs if r[f"pytorch_{key}"] is not None and r[f"alloy_{key}"] is not None]
    if not both:
        return None
    t = statistics.median(r[f"pytorch_{key}"] for r in both)
    a = statistics.median(r[f"alloy_{key}"] for r in both)
    ratios = [r[f"alloy_{key}"] / r[f"pytorch_{key}"] for r in both]
    return {"rounds": len(both), "pytorch": round(t, decimals + 1),
            "alloy": round(a, decimals + 1), "ratio": round(a / t, 3),
            "min": round(min(ratios), 3), "max": round(max(ratios), 3)}


for group, runs in groups.items():
    wall = figure(runs, "images_per_second")
    cpu = figure(runs, "images_per_cpu_second")
    summary = {"record": "summary"}
    summary.update({key: len(runs) if key == "rounds" else runs[0][key] for key in keys})
    summary.update({
        "pytorch_images_per_second_median": wall["pytorch"],
        "alloy_images_per_second_median": wall["alloy"],
        "ratio_of_medians": wall["ratio"],
        "round_ratio_min": wall["min"], "round_ratio_max": wall["max"],
        "cpu_rounds": cpu["rounds"] if cpu else 0,
        "pytorch_images_per_cpu_second_median": cpu["pytorch"] if cpu else None,
        "alloy_images_per_cpu_second_median": cpu["alloy"] if cpu else None,
        "cpu_ratio_of_medians": cpu["ratio"] if cpu else None,
        "cpu_round_ratio_min": cpu["min"] if cpu else None,
        "cpu_round_ratio_max": cpu["max"] if cpu else None,
    })
    if listed:
        per_round = {framework: [r[f"{framework}_{listed}"] for r in runs]
                     for framework in ("pytorch", "alloy")}
        for framework, values in per_round.items():
            summary[f"{framework}_{listed}_per_round"] = values
    print(json.dumps(summary))
    if cpu:
        rounds_note = "" if cpu["rounds"] == len(runs) else f" ({cpu['rounds']} rounds)"
        cpu_words = (f"{cpu['pytorch']:.{decimals}f} vs {cpu['alloy']:.{decimals}f}{rounds_note}, "
                     f"{cpu['ratio']:.2f}x, per round {cpu['min']:.2f}x-{cpu['max']:.2f}x")
    else:
        cpu_words = "n/a in every round"
    # "batch_size" 64 -> "batch 64, "
    group_words = f"{group_key.split('_')[0]} {group}, " if group_key else ""
    print(f"{group_words}medians of {len(runs)} rounds: PyTorch {wall['pytorch']:.{decimals}f} "
          f"images/s, Alloy {wall['alloy']:.{decimals}f} images/s, Alloy/PyTorch "
          f"{wall['ratio']:.2f}x, per round {wall['min']:.2f}x-{wall['max']:.2f}x (per CPU "
          f"second: {cpu_words})", file=sys.stderr)
    if listed:
        print(f"{listed_words} per round: PyTorch "
              + ", ".join(f"{value:.4f}" for value in per_round["pytorch"]) + "; Alloy "
              + ", ".join(f"{value:.4f}" for value in per_round["alloy"]), file=sys.stderr)
EOF
}

# Appends the JSON lines of the files $3... to the results file $1 with the machine, date,
# commit, the command $2 and the load (tools/results/stamp.py): the raw records that
# tools/results/render.py turns into the README's tables.
save_records() {
  local results=$1 command=$2
  shift 2
  mkdir -p "$(dirname "$results")"
  cat "$@" | "$python" "$here/tools/results/stamp.py" --command "$command" >>"$results"
  echo "${0##*/}: records appended to $results" >&2
}
