#!/usr/bin/env bash
# Alloy against PyTorch on one CUDA GPU, side by side in rounds (GPU bring-up, issue 14): LeNet
# seconds per epoch, the ffn model's seconds per epoch in fp32 and mixed precision, resnet18 fp32
# and mixed-precision images/s (with and without gradient clipping), Alloy O2 over O0, and the
# host waits of Alloy's O2 step. Prints one JSON line per comparison and round as each round
# ends, then one summary line per comparison (medians over the rounds, the speedup of the
# medians, the smallest and largest per-round speedup, the goal and whether it is met) and the
# results tables on standard error; writes every raw log, and the summary gpu_bench.md (the
# tables and the machine facts, rewritten after every round), to the --out folder.
#
#   tools/bench/gpu_vs_pytorch.sh [--device cuda|cpu] [--rounds R] [--alloy PATH]
#       [--python PATH] [--data-dir DIR] [--epochs N] [--resnet-epochs N] [--batch-size N]
#       [--parts lenet,ffn,resnet-fp32,resnet-amp,resnet-amp-clip] [--out DIR] [--run-timeout S]
#       [--time-budget S] [--commit TEXT]
#
# Defaults: --device cuda, 3 rounds, $ALLOY or build/bin/alloy (a CUDA build: -DALLOY_CUDA=ON),
# python3 (with PyTorch), Fashion-MNIST in /usr/share/datasets/fashion-mnist, batch 256, LeNet
# and ffn 6 epochs per run, resnet18 3 epochs of 50 steps per Alloy run (the synthetic set's
# 12800 images) and 50 warm-up + 100 timed steps per PyTorch run, every part but ffn
# (lenet,resnet-fp32,resnet-amp,resnet-amp-clip; $ALLOY_BENCH_PARTS, where set, replaces this
# default, so that tools/gpu/check.sh's bench phase can run other parts), --out
# gpu-bench-<UTC date and time> in the current folder, at most 150 s per run and a time budget
# of 540 s, so that the whole script ends within a 10-minute call (below).
#
# What is compared. Every run is a fresh process; the first epoch of every run (PyTorch's
# resnet18: the first 50 steps) is its warm-up (cuDNN and cuBLAS setup, the caching allocators,
# Alloy's CUDA graph capture after 3 eager steps) and is never timed.
#  - LeNet, seconds per epoch (goal: Alloy >= 5x faster). The reference recipe (batch 256, SGD
#    lr 0.2, fp32, TF32 off on both sides). PyTorch: tools/bench/lenet_pytorch.py --device cuda,
#    eager mode, the whole data set uploaded once as fp32, each epoch shuffled and gathered on
#    the GPU, loss and accuracy summed on the GPU; timed from a synchronised device after the
#    shuffle to a synchronised device after the last step. Alloy: `alloy train --model lenet
#    --device cuda --opt-level O0` (the CUDA graph path, --cuda-graph auto) and its epoch
#    events' epoch_seconds: from after the epoch's shuffle, through the host loader's gathering
#    of uint8 batches, their pinned double-buffered uploads (overlapped with the steps) and
#    every step, to the end-of-epoch read of the loss and accuracy sums, which waits for the
#    device. Neither includes test evaluation (Alloy evaluates after epoch_seconds stops),
#    checkpoints or process start. The figure is the mean over the timed epochs, both sides.
#  - ffn, seconds per epoch in fp32 (goal: Alloy O0 >= 1.0x PyTorch fp32 with TF32 off) and in
#    mixed precision (goal: Alloy O2 >= 1.2x PyTorch AMP), and Alloy O2 over Alloy O0 (no goal;
#    the model is small enough to be bound by launches, not arithmetic). The LeNet recipe
#    (batch 256, SGD lr 0.2, Fashion-MNIST, LeNet's epochs, timed the same way on both sides)
#    with the transformer feed-forward stack of `alloy train --model ffn` (layer norm, GELU,
#    dropout 0.1, residual sums; core/models/ffn.cpp). PyTorch: lenet_pytorch.py --model ffn
#    --device cuda --tf32 off, and with --amp: forward and loss under torch.autocast("cuda",
#    dtype=torch.float16), scaler.scale(loss).backward(), scaler.step, scaler.update (its
#    GradScaler waits once per step for its inf check, as it always does). Alloy: `alloy train
#    --model ffn --device cuda --opt-level O0`, and O2 (an fp16 model with fp32 master weights
#    and a dynamic loss scale on the device; DESIGN.md's opt levels). Not in the default
#    --parts (see the estimate below): run it with --parts ffn (or lenet,ffn), or from
#    check.sh's bench phase with ALLOY_BENCH_PARTS=ffn (docs/cuda.md, "What remains to run on
#    a GPU").
#  - resnet18 fp32 images/s (goal: Alloy O0 >= 1.0x PyTorch fp32 with TF32 off, the
#    like-for-like peer: Alloy's O0 is true fp32 with no TF32; PyTorch with TF32 on is an extra
#    row), and mixed precision (goal: Alloy O2 >= 1.2x the better of PyTorch's autocast fp16 +
#    GradScaler in NCHW and in channels-last, taken per round; both are extra rows), and Alloy
#    O2 over Alloy O0 (goal >= 2x). SGD lr 0.01 momentum 0.9, batch 256, 28x28x1 images.
#    PyTorch: tools/bench/resnet18_pytorch.py --device cuda, one uint8 batch kept on the device
#    and normalised in every step, cuDNN's heuristics (no --cudnn-benchmark, like Alloy),
#    synchronised before the first and after the last timed step. Alloy: `alloy train --model
#    resnet18 --dataset synthetic --device cuda --opt-level O0|O2`, the path users run (CUDA
#    graph replay, pinned batch stager, a fresh batch uploaded every step), images over the
#    timed epochs' epoch_seconds as for LeNet. (`alloy mem` times the eager step and waits for
#    the device after every step: not what training runs.)
#  - resnet18 mixed precision with gradient clipping at max norm 1 (part resnet-amp-clip; goal:
#    Alloy O2 >= 1.2x the better of PyTorch's clipped AMP in NCHW and in channels-last, taken
#    per round, as without clipping; both are extra rows): the three runs of resnet-amp with
#    --clip-grad-norm 1 added, the same batch, optimizer, steps and timing. PyTorch: the recipe
#    PyTorch documents for clipping under a GradScaler: backward of the scaled loss,
#    scaler.unscale_(optimizer) (the pass that step() makes anyway without clipping),
#    clip_grad_norm_(parameters, 1.0) (a pass that reads every gradient for the norm and one
#    that scales them in place), scaler.step (its host wait for the inf check), scaler.update.
#    Alloy: `--opt-level O2 --clip-grad-norm 1`, the norm summed on the device after the unscale
#    pass and the coefficient read by the fused update (no host wait, no pass that rewrites the
#    gradients). When resnet-amp runs too, an extra table gives what clipping costs each
#    framework: its clipped images/s over its unclipped, per round (PyTorch: the better layout
#    of each).
#  - Host waits per O2 step (goal 0 for those other than back-pressure): the epoch events'
#    host_waits over the timed epochs' steps, split into back-pressure (backpressure_waits: the
#    batch stager waiting for a pinned buffer whose previous upload is queued behind the steps
#    before it, the device being the bottleneck) and the rest, the waits for a result, to which
#    the goal applies; for Alloy's O2 runs (resnet18, clipped and not, and ffn); LeNet O0, ffn
#    O0 and resnet18 O0 are listed too. (The overflow monitor's poll, every 25th step of a
#    dynamic scale, is one queued download read once it has arrived: no host wait.)
#
# Estimate on an H100 (not yet measured: no run of this script has seen a GPU): a run takes
# about 7-11 s (each process's start ~5 s; LeNet epochs well under a second; resnet18 at b256
# some thousands of images/s in fp32, more with AMP), so a round of every default part (11
# runs) takes about 85-125 s and the default 3 rounds 4.5-6.5 minutes, plus a probe and one
# untimed Alloy warm-up run (it also absorbs a first-run PTX JIT): within the 540 s budget.
# Without resnet-amp-clip (8 runs) a round is about 60-90 s. The ffn part adds 4 runs of about
# 7-11 s (PyTorch's eager steps launch well over a hundred kernels each, more with AMP, and
# wait for the GradScaler's inf check; 235 steps an epoch), 30-45 s a round: in the default it
# would take the top of the estimate to about 520 s, past what check.sh's bench phase leaves
# the script (its --budget less 50 s), so it is a part of its own: --parts ffn, 3 rounds, is
# about 2-2.5 minutes with the probe and the warm-up.
#
# Robustness, for a run on a GPU that nobody here has watched: each run has --run-timeout
# seconds (a run that times out is not retried in later rounds); a failed run is recorded and
# the rest go on; no round starts that would end past --time-budget seconds from the script's
# start (0: no budget) at the last round's pace, and no run goes past the budget (the runs left
# then are skipped); gpu_bench.md is rewritten after every round. When Fashion-MNIST is missing
# from the default --data-dir, LeNet and ffn train on random pixels and labels of the same
# shape (timing only; gpu_bench.md says so). --parts picks comparisons, e.g. to split the work
# over several calls. --commit records the commit where the tree has no .git.
#
# --device cpu is a rehearsal, not a measurement: the whole pipeline (arguments, probes,
# rounds, parsing, tables, gpu_bench.md) on the CPU, with tiny random data (2 batches to train,
# 1 to test), batch 8, LeNet and ffn 3 epochs, resnet18 2 epochs (2 warm-up + 2 timed steps)
# and fp32 where PyTorch would use AMP (there is no AMP on the CPU: lenet_pytorch.py refuses
# --amp there; resnet18's clipped runs clip in fp32), no time budget, --data-dir ignored; its
# figures mean nothing.
#
# Exit status: 0 every run succeeded; 1 a run failed, timed out or left unreadable output (the
# summary still covers the others), or a setup error (no alloy, a CPU-only alloy with --device
# cuda, no torch); 2 a usage error; 77 no usable CUDA device (nvidia-smi and torch say why).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bench="$here/tools/bench"
# shellcheck source-path=SCRIPTDIR source=rounds.sh
source "$bench/rounds.sh"
command_line="$(printf '%q ' "$0" "$@")"
device=cuda
rounds=3
alloy="${ALLOY:-$here/build/bin/alloy}"
python=python3
data_dir=/usr/share/datasets/fashion-mnist
data_dir_given=0
epochs=""
resnet_epochs=""
batch=""
parts=${ALLOY_BENCH_PARTS:-lenet,resnet-fp32,resnet-amp,resnet-amp-clip}
max_norm=1  # resnet-amp-clip's --clip-grad-norm, both sides
keep=""
run_timeout=""
time_budget=""
commit=""

while (($#)); do
  case "$1" in
    --device | --rounds | --alloy | --python | --data-dir | --epochs | --resnet-epochs | \
      --batch-size | --parts | --out | --run-timeout | --time-budget | --commit)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --device) device="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --data-dir) data_dir="$2"; data_dir_given=1; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --resnet-epochs) resnet_epochs="$2"; shift 2 ;;
    --batch-size) batch="$2"; shift 2 ;;
    --parts) parts="$2"; shift 2 ;;
    --out) keep="$2"; shift 2 ;;
    --run-timeout) run_timeout="$2"; shift 2 ;;
    --time-budget) time_budget="$2"; shift 2 ;;
    --commit) commit="$2"; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

# The defaults of each mode (the header says why).
case "$device" in
  cuda) : "${epochs:=6}" "${resnet_epochs:=3}" "${batch:=256}" "${run_timeout:=150}" \
    "${time_budget:=540}" ;;
  cpu) : "${epochs:=3}" "${resnet_epochs:=2}" "${batch:=8}" "${run_timeout:=900}" \
    "${time_budget:=0}" ;;
  *) usage_error "--device must be cuda or cpu, not '$device'" ;;
esac
rounds=$(integer_at_least --rounds "$rounds" 1)
epochs=$(integer_at_least --epochs "$epochs" 2)
resnet_epochs=$(integer_at_least --resnet-epochs "$resnet_epochs" 2)
batch=$(integer_at_least --batch-size "$batch" 1)
run_timeout=$(integer_at_least --run-timeout "$run_timeout" 1)
time_budget=$(integer_at_least --time-budget "$time_budget" 0)
[[ -n "$alloy" ]] || usage_error "--alloy must not be empty"
[[ -n "$python" ]] || usage_error "--python must not be empty"
command -v "$python" >/dev/null || usage_error "--python '$python' is not a command"
# Python runs without LD_LIBRARY_PATH: PyTorch loads the cuDNN and cuBLAS it was built with from
# its own wheels, and a path set for Alloy's libraries makes it load others and refuse to start
# (on the H200 the system's cuDNN 9.14, which shared/gpu's on-device.sh puts first, against
# PyTorch's 9.19).
py=(env -u LD_LIBRARY_PATH "$python")
keep="${keep:-gpu-bench-$(date -u +%Y%m%dT%H%M%SZ)}"
declare -A part_runs=(
  [lenet]="lenet-pytorch lenet-alloy"
  [ffn]="ffn-pytorch-fp32 ffn-alloy-O0 ffn-pytorch-amp ffn-alloy-O2"
  [resnet-fp32]="r18-pytorch-fp32 r18-pytorch-tf32 r18-alloy-O0"
  [resnet-amp]="r18-pytorch-amp r18-pytorch-amp-cl r18-alloy-O2 r18-alloy-O2-nchw"
  [resnet-amp-clip]="r18-pytorch-amp-clip r18-pytorch-amp-cl-clip r18-alloy-O2-clip"
)
part_names="lenet|ffn|resnet-fp32|resnet-amp|resnet-amp-clip"
[[ "$parts" =~ ^($part_names)(,($part_names))*$ ]] ||
  usage_error "--parts (or ALLOY_BENCH_PARTS) must be a comma-separated list of lenet, ffn," \
    "resnet-fp32, resnet-amp, resnet-amp-clip, not '$parts'"
runs=()  # one round's runs, in the order of odd rounds
for part in lenet ffn resnet-fp32 resnet-amp resnet-amp-clip; do
  if [[ ",$parts," == *",$part,"* ]]; then
    read -ra more <<<"${part_runs[$part]}"
    runs+=("${more[@]}")
  fi
done
has_idx_files() {
  local base
  for base in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
    t10k-labels-idx1-ubyte; do
    [[ -f "$1/$base" || -f "$1/$base.gz" ]] || return 1
  done
}
if [[ "$device" == cuda && "$data_dir_given" == 1 ]] && ! has_idx_files "$data_dir"; then
  usage_error "--data-dir '$data_dir' lacks the Fashion-MNIST IDX files" \
    "(train-images-idx3-ubyte[.gz] and the rest)"
fi
require_alloy
alloy_version="$("$alloy" --version 2>&1)" ||
  { echo "${0##*/}: '$alloy --version' failed: $alloy_version" >&2; exit 1; }
if [[ "$device" == cuda && "$alloy_version" != *CUDA* ]]; then
  echo "${0##*/}: $alloy is not a CUDA build ($alloy_version): build with -DALLOY_CUDA=ON" \
    "(docs/cuda.md) and pass --alloy or ALLOY" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start_date="$(date -u '+%Y-%m-%d %H:%M:%S')"
start_seconds=$SECONDS

# The machine facts; exit 77 from the facts command when torch sees no usable CUDA device.
nvidia_smi="not found"
if command -v nvidia-smi >/dev/null 2>&1; then
  if smi="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"; then
    nvidia_smi="$(paste -sd ';' - <<<"$smi")"
  else
    nvidia_smi="failed: $(head -n 1 <<<"$smi")"
  fi
fi
if [[ -z "$commit" ]]; then
  if commit="$(git -C "$here" rev-parse --short=12 HEAD 2>/dev/null)"; then
    [[ -z "$(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null)" ]] ||
      commit+=" (+ uncommitted changes)"
  else
    commit="unknown (no git checkout here: pass --commit)"
  fi
fi

# The data, made once torch has been found: Fashion-MNIST for LeNet and ffn on the GPU (random
# data of its shape where it is missing) and Alloy's synthetic set for resnet18; tiny random IDX
# files for all in the CPU rehearsal (which ignores --data-dir).
make_data=()  # the arguments of gpu_bench.py make-data, if random data is needed
if [[ "$device" == cuda ]]; then
  resnet_data=(--dataset synthetic)
  resnet_steps_per_epoch=$(((12800 + batch - 1) / batch))  # README: synthetic is 12800 train
  amp_precision=amp
  amp_flag=(--amp)
  if has_idx_files "$data_dir"; then
    lenet_data="$data_dir"
    data="LeNet and ffn: Fashion-MNIST from $data_dir; resnet18: Alloy's synthetic set and one"
    data+=" random batch"
  else
    lenet_data="$work/data"
    make_data=(--train 60000 --test 10000)
    data="LeNet and ffn: random pixels and labels in Fashion-MNIST's shape (60000 train, 10000"
    data+=" test images: no Fashion-MNIST in $data_dir; timing only); resnet18: Alloy's"
    data+=" synthetic set and one random batch"
  fi
else
  lenet_data="$work/tiny"
  make_data=(--train $((2 * batch)) --test "$batch")
  resnet_data=(--dataset fashion-mnist --data-dir "$lenet_data")
  resnet_steps_per_epoch=2
  amp_precision=fp32
  amp_flag=()
  data="CPU rehearsal: random IDX files of $((2 * batch)) train and $batch test images"
fi
"${py[@]}" "$bench/gpu_bench.py" facts "$work" --mode "$device" --nvidia-smi "$nvidia_smi" \
  --alloy "$alloy" --alloy-version "$alloy_version" --commit "$commit" \
  --command-line "$command_line" --date "$start_date" --data "$data" --parts "$parts" \
  --rounds "$rounds" --batch-size "$batch" --epochs "$epochs" \
  --resnet-epochs "$resnet_epochs" --resnet-steps-per-epoch "$resnet_steps_per_epoch" \
  --runs "${runs[@]}"
if ((${#make_data[@]})); then
  "${py[@]}" "$bench/gpu_bench.py" make-data "$lenet_data" "${make_data[@]}"
fi
make_out_dir
mv "$work/facts.json" "$out/facts.json"
: >"$out/runs.jsonl"
: >"$out/notes.txt"
: >"$out/commands.txt"
[[ "$device" == cpu || "$batch" == 256 ]] ||
  echo "batch $batch: the goals are stated for batch 256" >>"$out/notes.txt"
[[ "$lenet_data" != "$work/data" ]] ||
  echo "LeNet and ffn trained on random data: no Fashion-MNIST in $data_dir" >>"$out/notes.txt"

warmup=$resnet_steps_per_epoch
timed=$(((resnet_epochs - 1) * resnet_steps_per_epoch))
torch_resnet=("${py[@]}" "$bench/resnet18_pytorch.py" --device "$device" --batch-sizes "$batch"
  --steps $((warmup + timed)) --warmup-steps "$warmup")
torch_ffn=("${py[@]}" "$bench/lenet_pytorch.py" --model ffn --device "$device" --epochs "$epochs"
  --batch-size "$batch" --lr 0.2 --seed 1 --data-dir "$lenet_data" --tf32 off)
alloy_resnet=("$alloy" train --model resnet18 "${resnet_data[@]}" --device "$device"
  --epochs "$resnet_epochs" --batch-size "$batch" --lr 0.01 --momentum 0.9 --seed 1)

# Sets cmd to the command of run $1, whose JSON goes to $2 (Alloy's --log-json; PyTorch's
# standard output).
command_of() {
  case "$1" in
    lenet-pytorch) cmd=("${py[@]}" "$bench/lenet_pytorch.py" --device "$device" --epochs "$epochs"
      --batch-size "$batch" --lr 0.2 --seed 1 --data-dir "$lenet_data" --tf32 off) ;;
    lenet-alloy) cmd=("$alloy" train --model lenet --device "$device" --opt-level O0
      --epochs "$epochs" --batch-size "$batch" --lr 0.2 --seed 1 --data-dir "$lenet_data"
      --log-json "$2") ;;
    ffn-pytorch-fp32) cmd=("${torch_ffn[@]}") ;;
    ffn-pytorch-amp) cmd=("${torch_ffn[@]}" "${amp_flag[@]}") ;;
    ffn-alloy-O0 | ffn-alloy-O2) cmd=("$alloy" train --model ffn --device "$device" --opt-level
      "${1##*-}" --epochs "$epochs" --batch-size "$batch" --lr 0.2 --seed 1 --data-dir
      "$lenet_data" --log-json "$2") ;;
    r18-pytorch-fp32) cmd=("${torch_resnet[@]}" --precision fp32 --tf32 off) ;;
    r18-pytorch-tf32) cmd=("${torch_resnet[@]}" --precision fp32 --tf32 on) ;;
    r18-pytorch-amp) cmd=("${torch_resnet[@]}" --precision "$amp_precision" --tf32 off) ;;
    r18-pytorch-amp-cl) cmd=("${torch_resnet[@]}" --precision "$amp_precision" --tf32 off
      --channels-last) ;;
    r18-pytorch-amp-clip) cmd=("${torch_resnet[@]}" --precision "$amp_precision" --tf32 off
      --clip-grad-norm "$max_norm") ;;
    r18-pytorch-amp-cl-clip) cmd=("${torch_resnet[@]}" --precision "$amp_precision" --tf32 off
      --channels-last --clip-grad-norm "$max_norm") ;;
    r18-alloy-O0 | r18-alloy-O2) cmd=("${alloy_resnet[@]}" --opt-level "${1##*-}"
      --log-json "$2") ;;
    r18-alloy-O2-clip) cmd=("${alloy_resnet[@]}" --opt-level O2 --clip-grad-norm "$max_norm"
      --log-json "$2") ;;
    r18-alloy-O2-nchw) cmd=("${alloy_resnet[@]}" --opt-level O2 --layout nchw --log-json "$2") ;;
  esac
}

# Seconds a run may take: --run-timeout, cut to what is left of --time-budget, so that a run
# that hangs cannot carry the script past the budget.
# At least 1: `timeout 0` would mean no limit.
run_limit() {
  local left=$((time_budget - (SECONDS - start_seconds)))
  if ((time_budget == 0 || left >= run_timeout)); then
    echo "$run_timeout"
  else
    echo $((left > 1 ? left : 1))
  fi
}

# Runs "$@" for at most $1 seconds (where coreutils' timeout exists), standard output to the
# file $2 and standard error to the file $3 (the same file: both into it); returns its exit
# status (124: timed out; 137: killed, after a timeout it ignored, or for memory).
bounded() {
  local seconds="$1" stdout="$2" stderr="$3" timer=()
  shift 3
  ! command -v timeout >/dev/null || timer=(timeout --kill-after=10 "$seconds")
  if [[ "$stdout" == "$stderr" ]]; then
    "${timer[@]}" "$@" >"$stdout" 2>&1
  else
    "${timer[@]}" "$@" >"$stdout" 2>"$stderr"
  fi
}

# One untimed Alloy run first: file caches, the driver's first CUDA context, a PTX JIT if the
# build lacks this GPU's code, so that round 1 starts warm like the others.
echo "warm-up: an untimed alloy train --model lenet --opt-level O2 --epochs 1" >&2
bounded "$(run_limit)" "$out/warmup.log" "$out/warmup.log" "$alloy" train --model lenet \
  --device "$device" --opt-level O2 --epochs 1 --batch-size "$batch" --data-dir "$lenet_data" &&
  rc=0 || rc=$?
((rc == 0)) || echo "the untimed warm-up run failed (exit $rc): see warmup.log" |
  tee -a "$out/notes.txt" >&2

declare -A timed_out=()
failures=0
last_round=0
for ((round = 1; round <= rounds; round++)); do
  round_start=$SECONDS
  order=("${runs[@]}")
  if ((round % 2 == 0)); then  # even rounds in reverse: drift within a round tilts neither way
    order=()
    for ((i = ${#runs[@]} - 1; i >= 0; i--)); do order+=("${runs[i]}"); done
  fi
  for name in "${order[@]}"; do
    output="$name-r$round.jsonl"
    stderr="$name-r$round.log"
    rm -f "$out/$output" "$out/$stderr"
    if [[ -n "${timed_out[$name]:-}" ]]; then
      status="skipped: timed out in round ${timed_out[$name]}"
      rc=0
      seconds=0
    elif allowed=$(run_limit) && ((allowed < 10)); then
      status="skipped: the time budget of $time_budget s is spent"
      rc=0
      seconds=0
    else
      command_of "$name" "$out/$output"
      printf 'round %d %s: %s\n' "$round" "$name" "$(printf '%q ' "${cmd[@]}")" \
        >>"$out/commands.txt"
      began=$(date +%s.%N)
      if [[ "$name" == *alloy* ]]; then  # the JSON goes to --log-json, the rest to the log
        bounded "$allowed" "$out/$stderr" "$out/$stderr" "${cmd[@]}" && rc=0 || rc=$?
      else
        bounded "$allowed" "$out/$output" "$out/$stderr" "${cmd[@]}" && rc=0 || rc=$?
      fi
      seconds=$(awk -v a="$began" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
      case "$rc" in
        0) status=ok ;;
        124) status="timed out at its limit of $allowed s"; timed_out[$name]=$round ;;
        137) status="killed (past the timeout, or out of memory)"; timed_out[$name]=$round ;;
        *) status="failed (exit $rc)" ;;
      esac
    fi
    [[ "$status" == ok ]] || failures=$((failures + 1))
    record='{"round": %d, "name": "%s", "status": "%s", "exit": %d, "seconds": %s, '
    record+='"output": "%s", "stderr": "%s"}\n'
    # shellcheck disable=SC2059  # the format is the record above
    printf "$record" "$round" "$name" "$status" "$rc" "$seconds" "$output" "$stderr" \
      >>"$out/runs.jsonl"
    echo "round $round/$rounds: $name: $status ($seconds s)" >&2
    if [[ "$status" != ok && "$status" != skipped* ]]; then  # its last words
      tail -n 3 "$out/$stderr" 2>/dev/null | sed 's/^/    /' >&2 || true
    fi
  done
  last_round=$round
  "${py[@]}" "$bench/gpu_bench.py" summarize "$out" --round "$round" ||
    echo "${0##*/}: the summary of round $round failed (the raw logs are in $out)" >&2
  elapsed=$((SECONDS - start_seconds))
  if ((time_budget > 0 && round < rounds && elapsed + SECONDS - round_start > time_budget)); then
    echo "stopped after round $round of $rounds: another round at this pace would end after" \
      "the time budget of $time_budget s ($elapsed s so far)" | tee -a "$out/notes.txt" >&2
    break
  fi
done

"${py[@]}" "$bench/gpu_bench.py" summarize "$out" --final \
  --end-date "$(date -u '+%Y-%m-%d %H:%M:%S')" || failures=$((failures + 1))
echo "rounds done: $last_round of $rounds, in $((SECONDS - start_seconds)) s; summary:" \
  "$out/gpu_bench.md" >&2
if ((failures > 0)); then
  echo "${0##*/}: not every run succeeded with readable output: see $out/gpu_bench.md and the" \
    "logs beside it" >&2
  exit 1
fi
