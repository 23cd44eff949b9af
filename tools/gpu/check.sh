#!/usr/bin/env bash
# Checks a GPU machine with a CUDA build of Alloy in one go: runs the selected phases, prints
# ONE table of every check (its figure, its goal, PASS/FAIL/SKIP), writes that table with the
# machine's details to DIR/summary.md and every raw log to DIR/gpu-check-logs.tar.gz (nothing
# else goes to DIR), and exits 0 when no check failed. A SKIP says what was not checked and
# why; it fails nothing.
#
#   tools/gpu/check.sh [--phases LIST] [--device cuda|cpu] [--emulated] [--quick] [--out DIR]
#                      [--data-dir DIR] [--budget SECONDS] [--timeout PHASE=SECONDS]...
#
# On a GPU machine: pack here with tools/gpu/pack.sh (a CUDA build with its libraries and data,
# for a bare machine), then one device run with the .gpu folder (put the packed commit in
# ALLOY_COMMIT: the carried tree has no .git, and the summary names it):
#
#   ALLOY_COMMIT=<commit> bash .gpu/on-device.sh bash tools/gpu/check.sh \
#       --phases tests,recipe,resume,mem,ddp,bench --budget 570
#
# It brings back 3 files from $OUT: probe.txt (on-device.sh), summary.md and
# gpu-check-logs.tar.gz; summary.md and the logs are rewritten after every phase, so a call cut
# short still returns the phases it finished. On one H100- or H200-class GPU each phase but the
# bench takes under a minute (tests, 4 at a time, and mem the longest); the bench
# (gpu_vs_pytorch.sh, 3 rounds of every part) needs at least 400 s. So the whole check needs
# about 9.5 minutes (the --budget above), plus the machine's start.
# suite (the CPU tests) is left out there: CI runs it. The limits below keep a hang from eating a call.
#
# Before the GPU, the same phases on the CUDA emulator (docs/cuda_emulator.md), an emulated
# build in build-emu; no GPU, no lent machine:
#
#   ALLOY_BUILD=build-emu tools/gpu/check.sh --device cuda --emulated --quick --phases recipe,resume,mem,ddp
#
# Seconds per phase there, MEASURED on this 2-core machine (the emulator runs kernels one
# thread at a time): recipe 64, resume 99, mem 62 (--max-batch to 256 included), ddp 83 (two
# world-1 NCCL and two two-rank Gloo runs; the one-process runs are the recipe's), bench 0 (a
# SKIP): about 5 minutes. tests and suite were not timed: the gpu tests take about 60-100 s
# there without the cases that take the emulator minutes, which the build puts in entries
# labelled emulator_slow and the tests phase leaves out (a SKIP naming them); suite is
# the CPU suite (~4 minutes of test time) plus the emulator's own tests and this script's test,
# which rehearses recipe and resume on the emulator (~3 minutes).
#
# Phases (default: all but seeds, in this order):
#   tests   ctest -L gpu in the build: tests found, none failed, none skipped while a GPU is
#           present (except a test that says it needs more GPUs than the machine has); without
#           a GPU every gpu test must skip (exit 77), never pass silently
#   suite   the rest of the suite (ctest -LE gpu, 4 at a time) on this machine: none failed
#   recipe  the LeNet recipe (README, "The reference recipe") at O0, O1, O2, O3 and O2 with the
#           loss scale forced to 2^40: O0 test accuracy >= 0.83, O1-O3 within 0.01 of O0, the
#           forced run skips steps, ends below 2^40 and within 0.02 of O2; an O2 run with
#           --accumulation-steps 2, --clip-grad-norm 5, a cosine schedule after one epoch of
#           warm-up, --ema-decay 0.99 and --label-smoothing 0.1 ends >= 0.81 (these features
#           cost LeNet 2-3 points by epoch 10, on the CPU too), its weight averages within 0.02
#           of its weights; the ffn model (layer norm, GELU, dropout, residual
#           sums) at O0 >= 0.86 and O2 within 0.01 of it; each run's accuracy,
#           final loss scale, skipped steps, mean epoch seconds, images/s, host waits per step
#   seeds   (only when named) the recipe at O0-O3 over seeds 1-5 (1-2 with --quick; seed 1 is the
#           recipe phase's run): each level's mean test accuracy, O0's >= 0.83 and O1-O3's within
#           0.01 of O0's. One seed's difference between levels spreads about 0.01 from the seed
#           alone (docs/PERFORMANCE.md), so the means tell a level that is
#           worse from a seed that was unlucky; about a minute on one GPU
#   resume  1 epoch, then --resume to 2, against 2 epochs straight, at O0 and O2, and ffn at O2
#           (dropout): the end events' params_digest equal (bit-exact resume)
#   mem     alloy mem --model resnet18 --batch-size 128: O1-O3 peaks below O0's, the driver's
#           view of device memory (nvidia-smi, sampled during the run, and alloy's own figures)
#           at least O0's peak, and --max-batch: every level fits at least
#           batch 128, and O1-O3 fit at least O0's batch; at O2 with --recompute blocks,
#           activations below 0.67x and a lower peak than without
#   ddp     DDP at world size 1 over NCCL ends with the single process's params_digest bit for
#           bit, O0 and O2, 1 epoch (docs/cuda.md); two ranks sharing cuda:0 over Gloo hold
#           bitwise-equal weights (params_digests) and, at the same global batch, train like one
#           process: test accuracy within 0.015 after the recipe's epochs, O0 and O2 (the docs
#           promise equal weights "within float tolerance", not bit for bit); with two GPUs
#           (or ALLOY_EMULATOR_DEVICES=2 with --emulated), also one rank per GPU over NCCL: the
#           launcher exits 0, both ranks' digests equal, accuracy as for Gloo
#   bench   tools/bench/gpu_vs_pytorch.sh --out DIR, its table in the summary (SKIP when the
#           script is not in this tree, exits 77, or in a rehearsal on the CPU)
#
# Options:
#   --phases LIST      comma-separated phases to run (default: all)
#   --device cuda|cpu  cuda (default): without a GPU (nvidia-smi lists none) it exits 77 and
#                      runs nothing. cpu: a REHEARSAL on the CPU of the same phases and checks
#                      (DDP over Gloo where the GPU run uses NCCL; no driver view, --max-batch
#                      or bench)
#   --emulated         with --device cuda and --quick: a REHEARSAL on the CUDA emulator
#                      (docs/cuda_emulator.md) of the GPU run, with the same `--device cuda`
#                      commands, against an emulated build (ALLOY_BUILD's CMakeCache.txt says
#                      ALLOY_CUDA=EMULATED, and ALLOY is its bin/alloy; else exit 2). No
#                      nvidia-smi needed: the driver's view is a SKIP (alloy's own device view is
#                      still checked), bench is a SKIP, and the emulated build's emulator_slow
#                      entries (tests/CMakeLists.txt: minutes each there) are left out, a SKIP
#   --quick            a short rehearsal: the MLP on the synthetic data set for 1 epoch (resume
#                      1 then 2), mem on LeNet batch 64 for 2 steps and --max-batch up to 256,
#                      accuracy goals loosened and marked "(rehearsal)"
#   --out DIR          where summary.md and the log tarball go (default: $OUT, else
#                      ./gpu-check-out)
#   --data-dir DIR     the Fashion-MNIST files (default /usr/share/datasets/fashion-mnist)
#   --budget SECONDS   the whole run's time: each phase's limit is cut to what is left, less 20 s
#                      to write the summary (a phase with under 30 s left is a FAIL, not run)
#   --timeout PHASE=SECONDS  that phase's limit (defaults: tests 540, suite 300, recipe 240,
#                      seeds 300, resume 150 (300 with --emulated), mem 420, ddp 300, bench
#                      540); a phase past its limit is killed, with its processes, and is a FAIL
#                      naming it
#
# Environment: ALLOY_BUILD (the build tree ctest runs in, default build, or build-emu with
# --emulated), ALLOY (the binary, default ALLOY_BUILD's bin/alloy), ALLOY_COMMIT (the commit
# named in the summary when this tree is not a git checkout), ALLOY_EMULATOR_DEVICES (with
# --emulated: the emulated GPUs, default 1). Needs python3 (tools/gpu/check_figures.py reads
# the JSON logs).
# Exit status: 0 no check failed, 1 a check failed, 2 usage error, 77 no GPU (without
# --device cpu or --emulated).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
self=$here/tools/gpu/check.sh
figures_py=$here/tools/gpu/check_figures.py
all_phases=(tests suite recipe seeds resume mem ddp bench)
declare -A limit=([tests]=540 [suite]=300 [recipe]=240 [seeds]=300 [resume]=150 [mem]=420
  [ddp]=300 [bench]=540)
declare -A timeouts=()  # --timeout's, over the defaults
default_phases=(tests suite recipe resume mem ddp bench)
phase_list=$(IFS=,; echo "${default_phases[*]}")
device=cuda
emulated=0
quick=0
out=${OUT:-./gpu-check-out}
data_dir=/usr/share/datasets/fashion-mnist
budget=""
run_phase=""

usage_error() {
  echo "check.sh: $* (see --help)" >&2
  exit 2
}

# The header comment, from its second line up to `set -euo pipefail`, without the #.
print_help() {
  sed -n '2,/^set -euo/p' "$self" | sed '$d; s/^# \{0,1\}//'
}

is_phase() {
  [[ " ${all_phases[*]} " == *" $1 "* ]]
}

# The arguments again, for each phase's own process (below).
arguments=("$@")
while (($#)); do
  case $1 in
    --phases | --device | --out | --data-dir | --budget | --timeout | --run-phase)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --phases) phase_list=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --emulated) emulated=1; shift ;;
    --quick) quick=1; shift ;;
    --out) out=$2; shift 2 ;;
    --data-dir) data_dir=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --timeout)
      if ! [[ $2 =~ ^([a-z]+)=([0-9]{1,5})$ ]] || ! is_phase "${BASH_REMATCH[1]}"; then
        usage_error "--timeout takes PHASE=SECONDS with a phase of: ${all_phases[*]}; got '$2'"
      fi
      timeouts[${BASH_REMATCH[1]}]=$((10#${BASH_REMATCH[2]}))
      shift 2 ;;
    # Internal: run one phase; check.sh starts itself so for each phase, under `timeout`.
    --run-phase) run_phase=$2; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
[[ $device == cuda || $device == cpu ]] || usage_error "--device is cuda or cpu, not '$device'"
[[ -z $budget || $budget =~ ^[0-9]{1,5}$ ]] || usage_error "--budget takes seconds, not '$budget'"
IFS=, read -r -a phases <<<"$phase_list"
((${#phases[@]})) || usage_error "--phases is empty"
for phase in "${phases[@]}"; do
  is_phase "$phase" || usage_error "unknown phase '$phase' (phases: ${all_phases[*]})"
done
build=${ALLOY_BUILD:-$here/build}
if ((emulated)); then
  build=${ALLOY_BUILD:-$here/build-emu}
fi
alloy=${ALLOY:-$build/bin/alloy}
if ((emulated)); then
  [[ $device == cuda ]] || usage_error "--emulated rehearses --device cuda, not --device $device"
  # The full runs (LeNet on Fashion-MNIST for 10 epochs, ResNet-18) would take hours there.
  ((quick)) || usage_error "--emulated needs --quick: the full runs are far too slow there"
  grep -qx 'ALLOY_CUDA:[A-Z]*=EMULATED' "$build/CMakeCache.txt" 2>/dev/null ||
    usage_error "--emulated needs an emulated build: $build/CMakeCache.txt does not say" \
      "ALLOY_CUDA=EMULATED (set ALLOY_BUILD; docs/cuda_emulator.md makes one)"
  [[ $alloy -ef $build/bin/alloy ]] ||
    usage_error "--emulated runs the emulated build's alloy: ALLOY=$alloy is not $build/bin/alloy"
  gpus=${ALLOY_EMULATOR_DEVICES:-1}
  [[ $gpus =~ ^[1-9][0-9]*$ ]] ||
    usage_error "ALLOY_EMULATOR_DEVICES is a device count, not '$gpus'"
  limit[resume]=300  # its 6 runs took 100 s on the emulator (2 cores), near the 150 s default
fi
for phase in "${!timeouts[@]}"; do limit[$phase]=${timeouts[$phase]}; done

# What the runs train, and the goals they are held to. --quick loosens the accuracy goals (the
# synthetic set is not Fashion-MNIST) and says so in every goal it loosens.
if ((quick)); then
  data=(--model mlp --dataset synthetic)
  epochs=1
  seed_count=2
  mem_batch=64
  mem_flags=(--model lenet --batch-size "$mem_batch" --steps 2)
  recompute_mem_flags=(--model resnet18 --batch-size 8 --steps 2 --opt-levels O2)
  max_batch_flags=(--max-batch --max-batch-limit 256)  # a few probes: 64, 128, 256
  acc_goal=0.5 acc_tolerance=0.05 forced_tolerance=0.05 ddp_tolerance=0.05 features_goal=0.45
  ffn_data=(--model ffn --dataset synthetic) ffn_lr=0.05 ffn_goal=0.5
  warmup_steps=10  # of the 50 steps of the run
  marked=" (rehearsal)"
else
  data=(--model lenet --data-dir "$data_dir")
  epochs=10
  seed_count=5
  mem_batch=128
  mem_flags=(--model resnet18 --batch-size "$mem_batch")
  recompute_mem_flags=(--model resnet18 --batch-size "$mem_batch" --opt-levels O2)
  max_batch_flags=(--max-batch)
  acc_goal=0.83 acc_tolerance=0.01 forced_tolerance=0.02 ddp_tolerance=0.015
  # The step's features train LeNet to less by epoch 10 than the plain recipe: the cosine rate
  # decays to zero and label smoothing blunts the loss (together about 0.82 against the plain
  # O2's 0.85, on the CPU and a GPU alike; each alone costs 1-2 points).
  features_goal=0.81
  # ffn on the CPU (docs/PERFORMANCE.md): 0.8714 at O0, 0.8708 at O2; PyTorch 0.8644.
  ffn_data=(--model ffn --data-dir "$data_dir") ffn_lr=0.2 ffn_goal=0.86
  warmup_steps=235  # the first epoch
  marked=""
fi
recipe=("${data[@]}" --batch-size 256 --lr 0.2)
ffn_recipe=("${ffn_data[@]}" --batch-size 256 --lr "$ffn_lr")
forced=(--init-loss-scale 1099511627776 --max-loss-scale 1099511627776)  # 2^40, as the README
step_features=(--accumulation-steps 2 --clip-grad-norm 5 --lr-schedule cosine
  --warmup-steps "$warmup_steps" --ema-decay 0.99 --ema-warmup --label-smoothing 0.1)
if [[ $device == cuda ]]; then
  on_device=(--device cuda)
  shared_device=(--device cuda:0)  # both ranks on one GPU: only Gloo allows it
  one_rank_backend=nccl
else
  on_device=(--device cpu)
  shared_device=(--device cpu)
  one_rank_backend=gloo  # NCCL reduces GPU tensors only
fi

# ---- Shared by the phases (each runs in its own process; see the end of the script) ----

# Appends one check to the table: phase, check, figure, goal, PASS|FAIL|SKIP.
record() {
  local cells=("${@//$'\t'/ }")  # a tab would start another cell
  printf '%s\t%s\t%s\t%s\t%s\n' "${cells[@]}" >>"$work/checks.tsv"
  say "  $5  $2: $3"
}

# A line of progress on standard output and in the phase's log.
say() {
  echo "$*" | tee -a "$logs/phase-$run_phase.txt"
}

# PASS when the awk condition $1 holds for a=$2, b=$3 and t=$4, FAIL otherwise, and FAIL when a
# or b is not a number (a run that ended without the figure).
judge() {
  local number='^-?[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$'
  if [[ $2 =~ $number && $3 =~ $number ]] &&
    awk -v a="$2" -v b="$3" -v t="${4:-0}" "BEGIN { exit !($1) }"; then
    echo PASS
  else
    echo FAIL
  fi
}
# |a - b| <= t, with room for the decimal figures' binary rounding (0.8471 - 0.8371 > 0.01).
within='(a - b <= t + 1e-9) && (b - a <= t + 1e-9)'

# Signed difference a - b, and a number, with 4 decimals ("?" for a missing figure).
difference() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") print "?"; else printf "%+.4f", a - b }'
}
decimals() {
  awk -v a="$1" 'BEGIN { if (a == "") print "?"; else printf "%.4f", a }'
}
# The mean of the arguments, with 4 decimals; empty when one is not a number ("?": a run without
# the figure) or there are none.
mean_of() {
  awk 'BEGIN { for (i = 1; i < ARGC; ++i) { if (ARGV[i] !~ /^[0-9.]+$/) exit; sum += ARGV[i] }
               if (ARGC > 1) printf "%.4f", sum / (ARGC - 1) }' "$@"
}

# Runs `alloy train FLAGS... --log-json RUN.jsonl` as run $1 in the logs (RUN.cmd: the command
# but its --log-json; .out: its standard output and error; .rc; .jsonl) and sets `run` to its
# path without the suffix. A run
# with the same flags that this invocation has already finished is not repeated: `run` is that
# one (the ddp phase's one-process baselines are the recipe's runs when both phases are run).
train() {
  local name=$1 command previous status=0 started=$SECONDS
  shift
  command=$(printf '%q ' "$alloy" train "$@")
  for previous in "$logs"/*.cmd; do
    # (A run killed with its phase has a .cmd but no .rc.)
    if [[ -e ${previous%.cmd}.rc && $(<"$previous") == "$command" &&
      $(<"${previous%.cmd}.rc") == 0 ]]; then
      run=${previous%.cmd}
      say "  $name: the same run as ${run##*/}, not repeated"
      return 0
    fi
  done
  run=$logs/$name
  echo "$command" >"$run.cmd"
  say "  $name: running"
  "$alloy" train "$@" --log-json "$run.jsonl" </dev/null >"$run.out" 2>&1 || status=$?
  echo "$status" >"$run.rc"
  say "  $name: exit $status, $((SECONDS - started)) s"
}

# Reads the figures of the run `run` into the associative array f (check_figures.py train);
# f[failure] says why a run has no end event.
declare -A f
read_run() {
  local key value
  f=()
  if [[ -s $run.jsonl ]]; then
    while IFS='=' read -r key value; do f[$key]=$value; done \
      < <(python3 "$figures_py" train "$run.jsonl")
  fi
  if [[ ${f[ended]:-0} != 1 ]]; then
    f[failure]="${run##*/} failed: exit $(<"$run.rc"): $(tail -n 1 "$run.out")"
  fi
}

# A free TCP port for a rendezvous (the default 29500 may be taken by another job).
free_port() {
  python3 "$figures_py" port
}

# Adds a section (markdown, from standard input) after the summary's table.
section() {
  cat >"$work/sections/$run_phase.md"
}

# ---- The phases ----

# A row for the tests of ctest's figures c (in the caller) that did not run, being marked
# DISABLED: nothing in the project disables a test, so a disabled one is a FAIL.
record_disabled() {
  ((c[disabled] == 0)) ||
    record "$run_phase" "tests disabled" "${c[disabled]}: ${c[disabled_names]}" "0" FAIL
}

# The rest of the suite on this machine: its CPU tests were written where no GPU is, and a GPU
# changes what `--device auto` picks. Skips are listed, not failed (python3-torch is optional).
phase_suite() {
  local output=$logs/ctest-suite.txt status=0 key value
  declare -A c
  say "  ctest -LE gpu: running"
  ctest --test-dir "$build" -LE gpu -j 4 --output-on-failure --timeout $((phase_seconds / 2)) \
    </dev/null >"$output" 2>&1 || status=$?
  while IFS='=' read -r key value; do c[$key]=$value; done \
    < <(python3 "$figures_py" ctest "$output" "$gpus")
  say "  ctest exited $status"
  record suite "the other tests on this machine (ctest -LE gpu)" \
    "${c[passed]} passed of ${c[total]}, ${c[skipped]} skipped${c[failed_names]:+; failed: ${c[failed_names]}}" \
    "none failed" "$(judge 'a == 0 && b > 0' "${c[failed]}" "${c[total]}")"
  record_disabled
  {
    echo "### suite: ctest -LE gpu (logs/ctest-suite.txt)"
    echo
    echo "- failed:"
    echo "  - ${c[failed_detail]:-none}" | sed 's/ ;; /\n  - /g'
    echo "- skipped: ${c[skipped]}"
    echo "- disabled: ${c[disabled_detail]:-none}"
    echo
  } | section
}

phase_tests() {
  local output=$logs/ctest-gpu.txt status=0 key value
  declare -A c
  say "  ctest -L gpu: running"
  # A hanging test is stopped by ctest at half the phase's time (a Timeout, counted as failed),
  # so that the other tests still run and report.
  # An emulated build's emulator_slow entries hold the cases that take the emulator minutes
  # (tests/CMakeLists.txt): left out of a rehearsal, and named as a SKIP.
  local left_out=() leave_out=()
  if ((emulated)); then
    mapfile -t left_out < <(ctest --test-dir "$build" -N -L emulator_slow |
      sed -n 's/^ *Test *#[0-9]*: *//p')
    leave_out=(-LE emulator_slow)
  fi
  # Four at a time: a test uses a sliver of the GPU, and each spends most of its time starting
  # CUDA and cuDNN; the one that fills the device's memory runs alone (RUN_SERIAL).
  local jobs=$(($(nproc) < 4 ? $(nproc) : 4))
  ctest --test-dir "$build" -L gpu "${leave_out[@]}" -V -j "$jobs" \
    --timeout $((phase_seconds / 2)) </dev/null >"$output" 2>&1 || status=$?
  while IFS='=' read -r key value; do c[$key]=$value; done \
    < <(python3 "$figures_py" ctest "$output" "$gpus")
  say "  ctest exited $status"
  record tests "gpu tests found" "${c[total]} in $build" ">= 1" "$(judge 'a >= 1' "${c[total]}" 0)"
  record tests "gpu tests failed" "${c[failed]}${c[failed_names]:+: ${c[failed_names]}}" "0" \
    "$(judge 'a == 0' "${c[failed]}" 0)"
  record_disabled
  if ((${#left_out[@]})); then
    record tests "gpu cases left out of this emulated build's run" \
      "${#left_out[@]} entries: ${left_out[*]}" "none on a GPU (here: minutes each)" SKIP
  fi
  if ((gpus)); then
    record tests "gpu tests skipped with a GPU present" \
      "${c[skipped_other]}${c[other_names]:+: ${c[other_names]}}; needing more GPUs than the $gpus here: ${c[skipped_allowed]}" \
      "0 (but those needing more GPUs)" "$(judge 'a == 0' "${c[skipped_other]}" 0)"
  else
    record tests "gpu tests skipped without a GPU" "${c[skipped]} of ${c[total]}" \
      "all (exit 77: no GPU, never a silent pass)" \
      "$(judge 'a == b && a > 0' "${c[skipped]}" "${c[total]}")"
  fi
  {
    echo "### tests: gpu tests not passed (ctest -L gpu -V: logs/ctest-gpu.txt)"
    echo
    # One test a line (check_figures.py joins them with " ;; ").
    echo "- failed:"
    echo "  - ${c[failed_detail]:-none}" | sed 's/ ;; /\n  - /g'
    if ((gpus)); then
      echo "- skipped, needing more GPUs than the $gpus here:"
      echo "  - ${c[allowed_detail]:-none}" | sed 's/ ;; /\n  - /g'
      echo "- skipped otherwise:"
      echo "  - ${c[other_detail]:-none}" | sed 's/ ;; /\n  - /g'
    else
      echo "- skipped: ${c[skipped]} (no GPU)"
    fi
    echo "- disabled: ${c[disabled_detail]:-none}"
    echo
  } | section
}

phase_recipe() {
  local level acc0 acc2 ffn0
  for level in O0 O1 O2 O3; do
    train "recipe-$level" "${on_device[@]}" "${recipe[@]}" --epochs "$epochs" --opt-level "$level"
    read_run
    if [[ $level == O0 ]]; then
      acc0=${f[test_acc]:-}
      record recipe "O0 test accuracy" "${f[failure]:-${f[summary]}}" ">= $acc_goal$marked" \
        "$(judge 'a >= b' "$acc0" "$acc_goal")"
      continue
    fi
    if [[ $level == O2 ]]; then acc2=${f[test_acc]:-}; fi
    record recipe "$level test accuracy vs O0" \
      "${f[failure]:-$(difference "${f[test_acc]}" "$acc0") vs O0; ${f[summary]}}" \
      "within $acc_tolerance of O0$marked" \
      "$(judge "$within" "${f[test_acc]:-}" "$acc0" "$acc_tolerance")"
  done
  train recipe-O2-forced "${on_device[@]}" "${recipe[@]}" --epochs "$epochs" --opt-level O2 \
    "${forced[@]}"
  read_run
  record recipe "O2 forced to 2^40: skipped steps" "${f[skipped]:-${f[failure]}}" "> 0" \
    "$(judge 'a > 0' "${f[skipped]:-}" 0)"
  record recipe "O2 forced to 2^40: final loss scale" "${f[loss_scale_text]:-${f[failure]}}" \
    "< 2^40" "$(judge 'a < b' "${f[loss_scale]:-}" 1099511627776)"
  record recipe "O2 forced to 2^40: test accuracy vs O2" \
    "${f[failure]:-$(difference "${f[test_acc]}" "$acc2") vs O2; ${f[summary]}}" \
    "within $forced_tolerance of O2$marked" \
    "$(judge "$within" "${f[test_acc]:-}" "$acc2" "$forced_tolerance")"
  # The step's optional features together, in the CUDA graph: two micro-batches a step, the
  # gradient norm clipped on the device, a warm-up and cosine rate computed there, and the
  # weight averages updated there.
  train recipe-O2-features "${on_device[@]}" "${recipe[@]}" --epochs "$epochs" --opt-level O2 \
    "${step_features[@]}"
  read_run
  local features_acc=${f[test_acc]:-}
  record recipe "O2 with ${step_features[*]}: test accuracy" \
    "${f[failure]:-$(difference "$features_acc" "$acc2") vs O2; ${f[summary]}}" \
    ">= $features_goal$marked" "$(judge 'a >= b' "$features_acc" "$features_goal")"
  record recipe "the same run's weight averages (--ema-decay 0.99): test accuracy vs its weights" \
    "${f[failure]:-$(difference "${f[test_acc_ema]}" "$features_acc") (test_acc_ema ${f[test_acc_ema]:-none})}" \
    "within $forced_tolerance of the run's$marked" \
    "$(judge "$within" "${f[test_acc_ema]:-}" "$features_acc" "$forced_tolerance")"
  # The transformer blocks: layer norm, GELU, dropout (Philox masks read from the device's step
  # count) and residual sums, in the ffn model, at O0 and O2.
  train recipe-ffn-O0 "${on_device[@]}" "${ffn_recipe[@]}" --epochs "$epochs" --opt-level O0
  read_run
  ffn0=${f[test_acc]:-}
  record recipe "ffn O0 test accuracy" "${f[failure]:-${f[summary]}}" ">= $ffn_goal$marked" \
    "$(judge 'a >= b' "$ffn0" "$ffn_goal")"
  train recipe-ffn-O2 "${on_device[@]}" "${ffn_recipe[@]}" --epochs "$epochs" --opt-level O2
  read_run
  record recipe "ffn O2 test accuracy vs ffn O0" \
    "${f[failure]:-$(difference "${f[test_acc]}" "$ffn0") vs O0; ${f[summary]}}" \
    "within $acc_tolerance of O0$marked" \
    "$(judge "$within" "${f[test_acc]:-}" "$ffn0" "$acc_tolerance")"
}

phase_seeds() {
  local level seed mean mean0="" values flags name
  for level in O0 O1 O2 O3; do
    values=()
    for ((seed = 1; seed <= seed_count; ++seed)); do
      # Seed 1 is the default: the recipe phase's own command, not run again when it ran.
      flags=("${on_device[@]}" "${recipe[@]}" --epochs "$epochs" --opt-level "$level")
      name=recipe-$level
      if ((seed > 1)); then flags+=(--seed "$seed") name+=-seed$seed; fi
      train "$name" "${flags[@]}"
      read_run
      values+=("${f[test_acc]:-?}")
    done
    mean=$(mean_of "${values[@]}")
    if [[ $level == O0 ]]; then
      mean0=$mean
      record seeds "O0 mean test accuracy, seeds 1-$seed_count" \
        "mean $(decimals "$mean") (${values[*]})" ">= $acc_goal$marked" \
        "$(judge 'a >= b' "$mean" "$acc_goal")"
      continue
    fi
    record seeds "$level mean test accuracy vs O0's, seeds 1-$seed_count" \
      "$(difference "$mean" "$mean0") vs O0; mean $(decimals "$mean") (${values[*]})" \
      "within $acc_tolerance of O0's$marked" \
      "$(judge "$within" "$mean" "$mean0" "$acc_tolerance")"
  done
}

phase_resume() {
  local which level label checkpoints resumed straight
  local -a model
  # ffn: its dropout masks follow the optimizer's step count, which the checkpoint carries.
  for which in O0 O2 ffn-O2; do
    level=${which#ffn-}
    if [[ $which == ffn-* ]]; then
      model=("${ffn_recipe[@]}") label="ffn $level"
    else
      model=("${recipe[@]}") label=$level
    fi
    checkpoints=$work/checkpoints/$which
    rm -rf "$checkpoints"
    train "resume-$which-first" "${on_device[@]}" "${model[@]}" --opt-level "$level" \
      --epochs 1 --checkpoint-dir "$checkpoints"
    train "resume-$which-resumed" "${on_device[@]}" "${model[@]}" --opt-level "$level" \
      --epochs 2 --resume "$checkpoints"
    read_run
    resumed=${f[digest]:-${f[failure]}}
    train "resume-$which-straight" "${on_device[@]}" "${model[@]}" --opt-level "$level" \
      --epochs 2
    read_run
    straight=${f[digest]:-${f[failure]}}
    record resume "$label: 1 epoch + resume to 2 == 2 straight" \
      "resumed $resumed, straight $straight" "equal params_digest" \
      "$([[ $resumed =~ ^[0-9a-f]+$ && $resumed == "$straight" ]] && echo PASS || echo FAIL)"
  done
}

# Runs `alloy mem` on the run's device with the phase's flags, then FLAGS, writing its JSON to
# $1.jsonl, its table to $1.txt and its messages to $1.err in the logs; returns its status.
mem() {
  local name=$1 command
  shift
  command=("$alloy" mem "${on_device[@]}" "${mem_flags[@]}" --json "$logs/$name.jsonl" "$@")
  printf '%q ' "${command[@]}" >"$logs/$name.cmd"
  say "  $name: running"
  "${command[@]}" </dev/null >"$logs/$name.txt" 2>"$logs/$name.err"
}

phase_mem() {
  local status=0 sampler="" key value
  declare -A m d
  # The driver's view: device memory in use, sampled every 100 ms while alloy mem runs (its
  # caching allocator keeps what it took until the process ends, so the samples see the peak).
  if [[ $device == cuda ]] && ((!emulated)); then
    nvidia-smi --id=0 --query-gpu=memory.used,memory.total --format=csv,noheader,nounits \
      -lms 100 >"$logs/mem-driver.csv" 2>&1 &
    sampler=$!
    sleep 0.5  # a sample from before the run
  fi
  mem mem || status=$?
  if [[ -n $sampler ]]; then
    kill "$sampler"
    wait "$sampler" || true  # killed: its status is the signal's
  fi
  if [[ -s $logs/mem.jsonl ]]; then
    while IFS='=' read -r key value; do m[$key]=$value; done \
      < <(python3 "$figures_py" mem "$logs/mem.jsonl")
  fi
  record mem "alloy mem ${mem_flags[*]} ran" \
    "exit $status; levels ${m[levels]:-none}; peaks O0 ${m[peak_mib_O0]:-?}, O1 ${m[peak_mib_O1]:-?}, O2 ${m[peak_mib_O2]:-?}, O3 ${m[peak_mib_O3]:-?} MiB" \
    "exit 0, O0-O3 measured" \
    "$([[ $status == 0 && ${m[levels]:-} == O0,O1,O2,O3 ]] && echo PASS || echo FAIL)"
  record mem "O1, O2, O3 peak below O0's" "${m[ratios]:-no figures}" "each < 1.00x" \
    "$(judge 'a < 1' "${m[worst_ratio]:-}" 0)"
  if [[ $device == cuda ]]; then
    if ((emulated)); then
      record mem "driver's view of device memory (nvidia-smi)" \
        "no driver to ask: the CUDA emulator's device memory is host memory (alloy's own view below)" \
        ">= O0 peak_bytes over the MiB before" SKIP
    else
      while IFS='=' read -r key value; do d[$key]=$value; done \
        < <(python3 "$figures_py" driver "$logs/mem-driver.csv")
      if ((d[samples] > 0)); then
        record mem "driver's view of device memory (nvidia-smi)" \
          "peak used ${d[peak_mib]} MiB of ${d[total_mib]} (${d[before_mib]} before the run; ${d[samples]} samples)" \
          ">= O0 peak_bytes (${m[peak_mib_O0]:-?} MiB) over the MiB before" \
          "$(judge 'a - t >= b / 1048576' "${d[peak_mib]}" "${m[peak_O0]:-}" "${d[before_mib]}")"
      else
        record mem "driver's view of device memory (nvidia-smi)" \
          "no memory samples from nvidia-smi: $(head -n 1 "$logs/mem-driver.csv")" \
          ">= O0 peak_bytes over the MiB before" SKIP
      fi
    fi
    record mem "alloy's own device view (O0)" \
      "reserved ${m[reserved_mib_O0]:-?} MiB, driver used ${m[driver_mib_O0]:-?} MiB" \
      ">= O0 peak_bytes (${m[peak_mib_O0]:-?} MiB)" \
      "$(judge 'a >= t && b >= t' "${m[reserved_mib_O0]:-}" "${m[driver_mib_O0]:-}" "${m[peak_mib_O0]:-}")"
    status=0
    declare -A x
    mem mem-max-batch "${max_batch_flags[@]}" || status=$?
    if [[ -s $logs/mem-max-batch.jsonl ]]; then
      while IFS='=' read -r key value; do x[$key]=$value; done \
        < <(python3 "$figures_py" mem "$logs/mem-max-batch.jsonl")
    fi
    record mem "--max-batch per level" \
      "exit $status; ${x[max_batches]:-$(tail -n 1 "$logs/mem-max-batch.err")}" \
      "exit 0, every level >= $mem_batch" \
      "$([[ $status == 0 ]] && judge 'a >= b' "${x[smallest_max_batch]:-}" "$mem_batch" || echo FAIL)"
    record mem "--max-batch: O1-O3 fit at least O0's batch" \
      "${x[half_below_o0]:+below O0: }${x[half_below_o0]:-none below O0}" "none below O0" \
      "$([[ $status == 0 && -n ${x[max_batches]:-} && -z ${x[half_below_o0]:-} ]] && echo PASS || echo FAIL)"
  else
    record mem "driver's view of device memory (nvidia-smi)" "no GPU (rehearsal on the CPU)" \
      ">= O0 peak_bytes over the MiB before" SKIP
    record mem "alloy's own device view (O0)" "CUDA only (rehearsal on the CPU)" \
      ">= O0 peak_bytes" SKIP
    record mem "--max-batch per level" "CUDA only (rehearsal on the CPU)" "exit 0" SKIP
  fi
  mem_recompute
  {
    echo "### mem: alloy mem ${on_device[*]} ${mem_flags[*]}"
    echo
    echo '```'
    cat "$logs/mem.txt"
    echo '```'
    echo
    if [[ $device == cuda ]]; then
      if ((!emulated)); then
        echo "Driver's view (nvidia-smi, every 100 ms during the run): peak ${d[peak_mib]:-?}" \
          "MiB used of ${d[total_mib]:-?} MiB, ${d[before_mib]:-?} MiB before it."
        echo
      fi
      if [[ -s $logs/mem-max-batch.txt ]]; then
        echo "The same with --max-batch:"
        echo
        echo '```'
        cat "$logs/mem-max-batch.txt"
        echo '```'
        echo
      fi
    fi
    echo "### mem: --recompute blocks (ResNet-18 at O2, ${recompute_mem_flags[*]})"
    echo
    echo '```'
    cat "$logs/mem-recompute-blocks.txt"
    echo '```'
    echo
  } | section
}

# Activation recomputation: ResNet-18's blocks at O2 (LeNet has none), with and without
# --recompute blocks: lower activations and peak, at the cost of one more forward.
mem_recompute() {
  local setting status key value
  local -a mem_flags=("${recompute_mem_flags[@]}")
  declare -A none blocks
  for setting in none blocks; do
    status=0
    mem "mem-recompute-$setting" --recompute "$setting" || status=$?
    if [[ -s $logs/mem-recompute-$setting.jsonl ]]; then
      while IFS='=' read -r key value; do
        if [[ $setting == none ]]; then none[$key]=$value; else blocks[$key]=$value; fi
      done < <(python3 "$figures_py" mem "$logs/mem-recompute-$setting.jsonl")
    fi
    if ((status != 0)); then
      record mem "--recompute $setting ran" "exit $status: $(tail -n 1 "$logs/mem-recompute-$setting.err")" \
        "exit 0" FAIL
    fi
  done
  record mem "--recompute blocks: O2 activations and peak below keeping them" \
    "activations ${none[activations_mib_O2]:-?} -> ${blocks[activations_mib_O2]:-?} MiB, peak ${none[peak_mib_O2]:-?} -> ${blocks[peak_mib_O2]:-?} MiB, images/s ${none[images_per_second_O2]:-?} -> ${blocks[images_per_second_O2]:-?}" \
    "activations < 0.67x, peak lower" \
    "$(judge 'a < 0.67 * b && t > 0' "${blocks[activations_O2]:-}" "${none[activations_O2]:-}" \
      "$(awk -v a="${blocks[peak_O2]:-0}" -v b="${none[peak_O2]:-0}" 'BEGIN { print (a < b) }')")"
}

phase_ddp() {
  local level single expected two_ranks agreeing
  for level in O0 O2; do
    # World size 1 over NCCL (a world of one joins a group when --dist-backend is given).
    train "ddp-one-process-$level" "${on_device[@]}" "${recipe[@]}" --epochs 1 --opt-level "$level"
    read_run
    expected=${f[digest]:-${f[failure]}}
    train "ddp-world-1-$level" "${on_device[@]}" "${recipe[@]}" --epochs 1 --opt-level "$level" \
      --dist-backend "$one_rank_backend" --master-port "$(free_port)"
    read_run
    record ddp "$level: world size 1 over $one_rank_backend == one process" \
      "${f[failure]:-params_digests [${f[digests]}], one process $expected; ${f[dist_backend]} on ${f[device]}, world size ${f[world_size]}}" \
      "params_digests == [one process's digest]" \
      "$([[ ${f[digests]:-} == "$expected" && ${f[dist_backend]:-} == "$one_rank_backend" &&
        ${f[world_size]:-} == 1 ]] && echo PASS || echo FAIL)"
    # Two ranks sharing one device over Gloo, against one process at the same global batch.
    train "recipe-$level" "${on_device[@]}" "${recipe[@]}" --epochs "$epochs" --opt-level "$level"
    read_run
    single=${f[test_acc]:-}
    expected=${f[digest]:-${f[failure]}}
    train "ddp-two-ranks-$level" "${shared_device[@]}" "${recipe[@]}" --epochs "$epochs" \
      --opt-level "$level" --dist-backend gloo --gpus 2 --master-port "$(free_port)"
    read_run
    two_ranks=${f[digest]:-}
    agreeing=FAIL
    [[ -n $two_ranks && ${f[digests]:-} == "$two_ranks,$two_ranks" && ${f[world_size]} == 2 ]] &&
      agreeing=PASS
    record ddp "$level: 2 ranks sharing ${shared_device[1]} over gloo agree" \
      "${f[failure]:-params_digests [${f[digests]}], world size ${f[world_size]}, device ${f[device]}}" \
      "every rank's digest equal" "$agreeing"
    record ddp "$level: 2 ranks vs one process, global batch 256" \
      "${f[failure]:-acc $(decimals "${f[test_acc]}") vs $(decimals "$single") ($(difference "${f[test_acc]}" "$single")); digest $two_ranks vs $expected (bit equality not promised)}" \
      "test acc within $ddp_tolerance (same weights within float tolerance)$marked" \
      "$(judge "$within" "${f[test_acc]:-}" "$single" "$ddp_tolerance")"
    # One rank per device over NCCL, where there are two devices.
    if [[ $device == cuda ]] && ((gpus >= 2)); then
      train "ddp-nccl-two-gpus-$level" "${on_device[@]}" "${recipe[@]}" --epochs "$epochs" \
        --opt-level "$level" --dist-backend nccl --gpus 2 --master-port "$(free_port)"
      read_run
      two_ranks=${f[digest]:-}
      agreeing=FAIL
      [[ -n $two_ranks && ${f[digests]:-} == "$two_ranks,$two_ranks" && ${f[world_size]} == 2 &&
        $(<"$run.rc") == 0 ]] && agreeing=PASS
      record ddp "$level: 2 ranks on cuda:0 and cuda:1 over nccl agree" \
        "${f[failure]:-params_digests [${f[digests]}], world size ${f[world_size]}, exit $(<"$run.rc")}" \
        "every rank's digest equal, exit 0" "$agreeing"
      record ddp "$level: 2 GPUs over nccl vs one process, global batch 256" \
        "${f[failure]:-acc $(decimals "${f[test_acc]}") vs $(decimals "$single") ($(difference "${f[test_acc]}" "$single"))}" \
        "test acc within $ddp_tolerance$marked" \
        "$(judge "$within" "${f[test_acc]:-}" "$single" "$ddp_tolerance")"
    fi
  done
}

phase_bench() {
  local script=$here/tools/bench/gpu_vs_pytorch.sh status=0 flags
  if [[ ! -e $script ]]; then
    record bench "tools/bench/gpu_vs_pytorch.sh" \
      "not in this tree (being written on another branch)" "exit 0, DIR/gpu_bench.md" SKIP
    return 0
  fi
  if [[ $device == cpu ]] || ((emulated)); then
    record bench "tools/bench/gpu_vs_pytorch.sh" \
      "not run: it measures a GPU's speed, which neither the CPU nor the emulator shows (its own rehearsal: gpu_vs_pytorch.sh --device cpu)" \
      "exit 0, DIR/gpu_bench.md" SKIP
    return 0
  fi
  flags=(--out "$logs/bench")
  # Where the script offers them: stop starting rounds in time to end within this phase's
  # limit, and name the commit (the carried tree has no .git).
  if grep -q -- '--time-budget' "$script"; then
    flags+=(--time-budget $((phase_seconds > 60 ? phase_seconds - 30 : 30)))
  fi
  if [[ -n ${ALLOY_COMMIT:-} ]] && grep -q -- '--commit' "$script"; then
    flags+=(--commit "$ALLOY_COMMIT")
  fi
  printf '%q ' "$script" "${flags[@]}" >"$logs/bench.cmd"
  say "  gpu_vs_pytorch.sh: running"
  bash "$script" "${flags[@]}" </dev/null >"$logs/bench.txt" 2>&1 || status=$?
  if ((status == 77)); then
    record bench "gpu_vs_pytorch.sh" "exit 77: $(tail -n 1 "$logs/bench.txt")" \
      "exit 0, DIR/gpu_bench.md" SKIP
  elif ((status == 0)) && [[ -s $logs/bench/gpu_bench.md ]]; then
    record bench "gpu_vs_pytorch.sh" "exit 0; its table below" "exit 0, DIR/gpu_bench.md" PASS
  else
    record bench "gpu_vs_pytorch.sh" \
      "exit $status$([[ -s $logs/bench/gpu_bench.md ]] || echo ', no gpu_bench.md'): $(tail -n 1 "$logs/bench.txt")" \
      "exit 0, DIR/gpu_bench.md" FAIL
  fi
  if [[ -s $logs/bench/gpu_bench.md ]]; then
    { echo "### bench: tools/bench/gpu_vs_pytorch.sh"; echo; cat "$logs/bench/gpu_bench.md"; echo; } |
      section
  fi
}

# ---- One phase, in the process that `timeout` bounds ----

if [[ -n $run_phase ]]; then
  work=$GPU_CHECK_WORK gpus=$GPU_CHECK_GPUS phase_seconds=$GPU_CHECK_SECONDS
  logs=$work/logs
  "phase_$run_phase"
  exit 0
fi

# ---- The whole check ----

command -v python3 >/dev/null || { echo "check.sh: needs python3 to read the logs" >&2; exit 1; }
[[ -x $alloy ]] || { echo "check.sh: $alloy is not an executable (set ALLOY)" >&2; exit 1; }
version=$("$alloy" --version 2>&1) || { echo "check.sh: $alloy --version failed: $version" >&2; exit 1; }
gpu_line=""
if ((emulated)); then
  gpu_line="$gpus x Alloy CUDA emulator (emulated, ${ALLOY_EMULATOR_MEMORY:-8G} each; not a GPU)"
elif command -v nvidia-smi >/dev/null; then
  gpu_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used \
    --format=csv,noheader 2>&1) || gpu_line=""
fi
if ((!emulated)); then gpus=$(grep -c . <<<"$gpu_line" || true); fi
if [[ $device == cuda ]] && ((!emulated)); then
  if ((gpus == 0)); then
    echo "check.sh: no GPU on this machine (nvidia-smi lists none): nothing checked." \
      "--device cpu rehearses the same checks on the CPU, --emulated --quick on the CUDA emulator."
    exit 77
  fi
  [[ $version == *CUDA* ]] ||
    { echo "check.sh: $alloy is not a CUDA build ($version); set ALLOY" >&2; exit 1; }
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
logs=$work/logs
mkdir -p "$logs" "$work/sections"
: >"$work/checks.tsv"
# The phases' processes read these; ALLOY and ALLOY_BUILD as absolute paths, as the commands in
# the logs and the bench script (which may change folders) need them.
[[ $alloy == /* ]] || alloy=$PWD/$alloy
[[ $build == /* ]] || build=$PWD/$build
export GPU_CHECK_WORK=$work GPU_CHECK_GPUS=$gpus ALLOY=$alloy ALLOY_BUILD=$build

if [[ -n ${ALLOY_COMMIT:-} ]]; then
  commit="$ALLOY_COMMIT (ALLOY_COMMIT)"
elif commit=$(git -C "$here" rev-parse HEAD 2>/dev/null); then
  [[ -z $(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null) ]] ||
    commit+=" with uncommitted changes"
else
  commit="unknown (not a git checkout; set ALLOY_COMMIT)"
fi
started=$(date -u +%FT%TZ)
timings=""

# summary.md (the machine, the table, the phases' sections) and the log tarball, rewritten
# after every phase so that a call cut short still brings back what finished.
write_out() {
  local passed failed skipped verdict mode rehearsal
  passed=$(cut -f5 "$work/checks.tsv" | grep -c '^PASS$' || true)
  failed=$(cut -f5 "$work/checks.tsv" | grep -c '^FAIL$' || true)
  skipped=$(cut -f5 "$work/checks.tsv" | grep -c '^SKIP$' || true)
  verdict=$( ((failed)) && echo FAIL || echo PASS)
  mode="on $device"
  rehearsal=""
  if [[ $device == cpu ]]; then mode="REHEARSAL on the CPU"; fi
  if ((emulated)); then mode="REHEARSAL on the CUDA emulator, not a GPU result"; fi
  if ((quick)); then mode+=", --quick (REHEARSAL: short runs, loosened goals)"; fi
  if [[ $device == cpu ]] || ((quick)); then rehearsal="REHEARSAL, not a GPU result"; fi
  if ((emulated)); then rehearsal="REHEARSAL on the CUDA emulator, not a GPU result"; fi
  table=$(python3 "$figures_py" table "$work/checks.tsv")
  # Said above the table too, which is also printed alone on standard output.
  if [[ -n $rehearsal ]]; then table=$(printf '%s:\n\n%s' "$rehearsal" "$table"); fi
  {
    echo "# Alloy GPU check: $verdict ($passed passed, $failed failed, $skipped skipped)" \
      "${rehearsal:+- $rehearsal}"
    echo
    echo "- mode: $mode; phases: ${phases[*]}"
    echo "- started: $started; written: $(date -u +%FT%TZ); phase seconds:$timings"
    echo "- host: ${HOSTNAME:-$(uname -n)}, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') x $(nproc)"
    echo "- GPU (name, driver, memory total, used at the start): ${gpu_line:-none}"
    echo "- alloy: $version ($alloy); build: $build"
    echo "- commit: $commit"
    echo
    echo "$table"
    echo
    for phase in "${phases[@]}"; do
      if [[ -e $work/sections/$phase.md ]]; then cat "$work/sections/$phase.md"; fi
    done
    echo "Raw logs (every command, its output and JSON log): gpu-check-logs.tar.gz"
  } >"$out/summary.md"
  tar -czf "$out/gpu-check-logs.tar.gz.part" -C "$work" logs
  mv "$out/gpu-check-logs.tar.gz.part" "$out/gpu-check-logs.tar.gz"
}

echo "check.sh: $version, ${gpu_line:-no GPU}; out $out"
deadline=$((SECONDS + ${budget:-999999}))
for run_phase in "${phases[@]}"; do
  left=$((deadline - SECONDS - 20))
  if ((left < 30)); then
    printf '%s\t%s\t%s\t%s\t%s\n' "$run_phase" "phase started" \
      "not started: $((deadline - SECONDS)) s of --budget left" "30 s to run" FAIL \
      >>"$work/checks.tsv"
    continue
  fi
  seconds=${limit[$run_phase]}
  ((seconds <= left)) || seconds=$left
  echo "== $run_phase (limit $seconds s)" | tee -a "$logs/phase-$run_phase.txt"
  phase_started=$SECONDS
  status=0
  # Its own process under `timeout`, which kills it with every process it started (timeout
  # signals its whole process group) when the limit passes; its errors go to its log.
  GPU_CHECK_SECONDS=$seconds timeout -k 10 "$seconds" "$BASH" "$self" "${arguments[@]}" \
    --run-phase "$run_phase" </dev/null 2>>"$logs/phase-$run_phase.txt" || status=$?
  timings+=" $run_phase $((SECONDS - phase_started))"
  if ((status == 124 || status == 137)); then
    printf '%s\t%s\t%s\t%s\t%s\n' "$run_phase" "phase finished in time" \
      "timed out: killed after $seconds s, at: $(tail -n 1 "$logs/phase-$run_phase.txt" | sed 's/^ *//')" \
      "< $seconds s" FAIL \
      >>"$work/checks.tsv"
  elif ((status != 0)); then
    printf '%s\t%s\t%s\t%s\t%s\n' "$run_phase" "phase ran" \
      "exit $status: $(tail -n 1 "$logs/phase-$run_phase.txt")" "exit 0" FAIL \
      >>"$work/checks.tsv"
  fi
  write_out
done
write_out
echo
echo "$table"
echo
head -n 1 "$out/summary.md"
echo "written: $out/summary.md, $out/gpu-check-logs.tar.gz"
if cut -f5 "$work/checks.tsv" | grep -qx FAIL; then exit 1; fi
