#!/usr/bin/env bash
# Trains the reference LeNet recipe (Fashion-MNIST, SGD lr 0.2, batch 256, fp32) with PyTorch
# on the CPU and with Alloy on the CPU, side by side in one go, with the same thread count and
# epochs, over several rounds, and prints the training throughput of both and the ratio
# Alloy / PyTorch.
#
#   tools/bench/lenet_vs_pytorch.sh [--epochs N] [--threads N] [--rounds R] [--alloy PATH]
#                                   [--data-dir DIR] [--python PATH] [--keep DIR]
#                                   [--variants LIST] [--model lenet|ffn] [--results FILE]
#
# Defaults: 2 epochs per run, 3 rounds, every core this process may use, build/bin/alloy,
# Debian's data set and /usr/bin/python3 (Debian's python3-torch; `tools/setup.sh --with-torch`
# installs it). PyTorch trains in tools/bench/lenet_pytorch.py, Alloy with
# `alloy train --model lenet --opt-level O0`, each a whole run from a fresh process.
# images/s is training images over the wall time spent in training steps, test evaluation
# excluded, for both programs. Run it on an otherwise idle machine: both runs share its cores
# with anything else that runs. As a figure less sensitive to other load it also prints training
# images per CPU second: the same images over the whole process's user + system CPU time (data
# loading and test evaluation included, for both). It reports the test accuracy after the last
# epoch of every run too.
#
# Rounds: the speed of a shared machine or VM drifts from minute to minute (by 30% on ours), so
# one PyTorch run followed by one Alloy run gives a ratio that swings with the drift (1.30x and
# 1.64x from two runs of the same binaries). Each round trains with PyTorch and with Alloy, each
# a fresh process, PyTorch first in odd rounds and Alloy first in even ones, so that slow drift
# hits both frameworks alike. It prints every round's figures, ratios and accuracies, then the
# median of each framework over the rounds (with an even number of rounds, the mean of the
# middle two), the ratio of the medians, and the smallest and largest per-round ratio. A wide
# min..max range means the ratio is noise: rerun on a quieter machine or with more rounds.
# Rounds do not remove load that changes within one run, nor load that slows one framework more
# than the other.
#
# Models: --model ffn (default lenet) trains core/models/ffn.cpp's stack of transformer
# feed-forward blocks (layer norm, GELU, dropout 0.1, residual sums) in both frameworks instead
# of LeNet, with the same recipe (tools/bench/lenet_pytorch.py --model ffn builds PyTorch's twin).
#
# Variants: --variants base,clip,accumulate,schedule,ema,smooth (default base) measures the step's
# optional features in both frameworks, each round running every variant of both: clip adds
# --clip-grad-norm 1 (PyTorch: clip_grad_norm_ after backward), accumulate --accumulation-steps 4
# (four micro-batches of 64 per step), schedule --lr-schedule cosine --warmup-steps 235 (PyTorch:
# the same rate set before each step), ema --ema-decay 0.999 (PyTorch: timm's ModelEmaV3 way,
# fp32 averages of the parameters and buffers updated after each step by torch._foreach_mul_
# and _foreach_add_; in both, the update is part of the timed step and the averages' test
# evaluation after each epoch is not), smooth --label-smoothing 0.1 (PyTorch: cross_entropy's
# label_smoothing). Each record and summary then names its variant, an ema
# record also has the averages' accuracy after the last epoch (pytorch_test_acc_ema,
# alloy_test_acc_ema), and, with base among them, a last JSON line ("record": "overhead") gives
# each framework's median images/s of each variant over its base median: what the feature costs
# there.
#
# Standard output: one JSON line per round ("record": "round"), as each round ends, then one
# ("record": "summary") with the medians, the ratio of medians, the per-round min and max ratios
# and the accuracies of every round. Standard error: each run's epoch lines and the same figures
# in words. A CPU-time figure is null (n/a) where the measured CPU time is not positive (clock
# ticks are 10 ms); medians and ratios of that figure then cover the other rounds.
#
# Records: the round and summary lines are also appended to --results FILE (default
# docs/results/MODEL_cpu_vs_pytorch.jsonl) with the machine, date, commit, command and load
# (tools/results/stamp.py), for tools/results/render.py's README tables.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$here/tools/bench/rounds.sh"
epochs=2
rounds=3
threads="$(nproc)"
alloy="$here/build/bin/alloy"
data_dir=/usr/share/datasets/fashion-mnist
python=/usr/bin/python3
keep=""
variants=base
model=lenet
results=""

while (($#)); do
  case "$1" in
    --epochs | --threads | --rounds | --alloy | --data-dir | --python | --keep | --variants | \
      --model | --results)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --epochs) epochs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --data-dir) data_dir="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --variants) variants="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

epochs=$(integer_at_least --epochs "$epochs" 1)
threads=$(integer_at_least --threads "$threads" 1)
rounds=$(integer_at_least --rounds "$rounds" 1)
[[ -n "$alloy" ]] || usage_error "--alloy must not be empty"
[[ -n "$python" ]] || usage_error "--python must not be empty"
[[ -d "$data_dir" ]] || usage_error "--data-dir '$data_dir' is not a directory"
command -v "$python" >/dev/null || usage_error "--python '$python' is not a command"
IFS=, read -r -a variant_list <<<"$variants"
((${#variant_list[@]} > 0)) || usage_error "--variants must name at least one variant"
for variant in "${variant_list[@]}"; do
  case "$variant" in
    base | clip | accumulate | schedule | ema | smooth) ;;
    *) usage_error "--variants: '$variant' is not one of base, clip, accumulate, schedule, ema, smooth" ;;
  esac
done
case "$model" in
  lenet | ffn) ;;
  *) usage_error "--model: '$model' is not one of lenet, ffn" ;;
esac
if ((${#variant_list[@]} > 1)) && [[ ",$variants," != *,base,* ]]; then
  usage_error "--variants needs base among several variants (the overheads are relative to it)"
fi
require_alloy
make_out_dir
results="${results:-$here/docs/results/${model}_cpu_vs_pytorch.jsonl}"
invocation="tools/bench/lenet_vs_pytorch.sh --model $model --epochs $epochs --threads $threads"
invocation+=" --rounds $rounds --variants $variants"
# PyTorch's BLAS (Debian: OpenBLAS, pthreads) keeps its own pool of one thread per core beside
# torch's OpenMP threads, and torch.set_num_threads does not bound it: at --threads 2 the two
# pools fight over the cores (LeNet 3300 images/s instead of 4800, the FFN 2900 instead of
# 13000 on our 2-core VM). So PyTorch runs in each of these settings and the faster counts:
# one BLAS thread inside each of torch's, or BLAS on every thread with torch's idle OpenMP
# threads sleeping instead of spinning. The record names the one that counted (pytorch_env).
torch_envs=("OPENBLAS_NUM_THREADS=1" "OPENBLAS_NUM_THREADS=$threads OMP_WAIT_POLICY=passive")

# The flags of a variant, the same words for both programs.
variant_flags() {
  case "$1" in
    base) ;;
    clip) echo --clip-grad-norm 1 ;;
    accumulate) echo --accumulation-steps 4 ;;
    schedule) echo --lr-schedule cosine --warmup-steps 235 ;;
    ema) echo --ema-decay 0.999 ;;
    smooth) echo --label-smoothing 0.1 ;;
  esac
}

echo "$model, Fashion-MNIST, SGD lr 0.2, batch 256, fp32 on the CPU: $epochs epochs per run," \
  "$threads threads, $rounds rounds of PyTorch and Alloy side by side" >&2

# Train round $round's run of each framework, its events in $out/<framework>-r$round.jsonl and
# its CPU seconds in $out/<framework>-r$round.cpu.
run_pytorch() {
  local config best logs=()
  for config in "${!torch_envs[@]}"; do
    logs+=("$out/pytorch-$tag-env$config.jsonl")
    echo "== round $round/$rounds, $variant: PyTorch, ${torch_envs[$config]}" >&2
    # shellcheck disable=SC2046,SC2086 # the variant's flags and the settings are words
    cpu_timed "$out/pytorch-$tag-env$config.cpu" "${pytorch_unpinned[@]}" \
      ${torch_envs[$config]} "$python" \
      "$here/tools/bench/lenet_pytorch.py" --model "$model" --epochs "$epochs" \
      --threads "$threads" --data-dir "$data_dir" $(variant_flags "$variant") \
      >"${logs[$config]}"
    cat "${logs[$config]}" >&2
  done
  # The index of the setting whose end line has the most images/s.
  best=$("$python" -c 'import json, sys
def speed(path):
    return next(e for e in map(json.loads, open(path)) if e.get("event") == "end")["images_per_second"]
speeds = [speed(path) for path in sys.argv[1:]]
print(speeds.index(max(speeds)))' "${logs[@]}")
  cp "$out/pytorch-$tag-env$best.jsonl" "$out/pytorch-$tag.jsonl"
  cp "$out/pytorch-$tag-env$best.cpu" "$out/pytorch-$tag.cpu"
  echo "${torch_envs[$best]}" >"$out/pytorch-$tag.env"
}
run_alloy() {
  echo "== round $round/$rounds, $variant: Alloy" >&2
  # shellcheck disable=SC2046
  cpu_timed "$out/alloy-$tag.cpu" "$alloy" train --model "$model" --device cpu --opt-level O0 \
    --epochs "$epochs" --batch-size 256 --lr 0.2 --seed 1 --threads "$threads" \
    --data-dir "$data_dir" $(variant_flags "$variant") --log-json "$out/alloy-$tag.jsonl" >&2
}

: >"$out/rounds.jsonl"
# Every variant in each round, so drift hits the variants alike.
runs=()
for ((round = 1; round <= rounds; round++)); do
  for variant in "${variant_list[@]}"; do runs+=("$round:$variant"); done
done
for run in "${runs[@]}"; do
  round=${run%%:*} variant=${run#*:}
  tag="r$round"
  [[ "$variants" == base ]] || tag="$variant-r$round"
  # PyTorch first in odd rounds and Alloy first in even ones, so drift within a round tilts
  # neither way.
  if ((round % 2 == 1)); then
    run_pytorch
    run_alloy
  else
    run_alloy
    run_pytorch
  fi
  "$python" - "$out/pytorch-$tag.jsonl" "$out/alloy-$tag.jsonl" \
    "$(cat "$out/pytorch-$tag.cpu")" "$(cat "$out/alloy-$tag.cpu")" \
    "$round" "$rounds" "$threads" "$epochs" "$out/rounds.jsonl" "$variant" "$model" \
    "$(cat "$out/pytorch-$tag.env")" <<'EOF'
import json
import sys


def events_of(path):
    with open(path) as f:
        return list(map(json.loads, f))


def images(epochs):
    # An epoch's training images = its images/s x its seconds.
    return sum(e["images_per_second"] * e["epoch_seconds"] for e in epochs)


def ratio(a, b):
    return None if a is None or b is None else a / b


def fmt(x, digits=0, suffix=""):
    return "n/a" if x is None else f"{x:.{digits}f}{suffix}"


torch_events, alloy_events = events_of(sys.argv[1]), events_of(sys.argv[2])
torch_epochs = [e for e in torch_events if e.get("event") == "epoch"]
alloy_epochs = [e for e in alloy_events if e.get("event") == "epoch"]
torch_end = next((e for e in torch_events if e.get("event") == "end"), {})
torch_cpu, alloy_cpu = float(sys.argv[3]), float(sys.argv[4])
round_, rounds, threads, epochs = map(int, sys.argv[5:9])
variant, model, torch_env = sys.argv[10], sys.argv[11], sys.argv[12]
records = sys.argv[9]  # full precision, for the summary; standard output gets rounded figures
assert len(torch_epochs) == epochs and len(alloy_epochs) == epochs, (torch_epochs, alloy_epochs)

# Images over training seconds, all epochs together.
torch_ips = images(torch_epochs) / sum(e["epoch_seconds"] for e in torch_epochs)
alloy_ips = images(alloy_epochs) / sum(e["epoch_seconds"] for e in alloy_epochs)
torch_ipc = images(torch_epochs) / torch_cpu if torch_cpu > 0 else None
alloy_ipc = images(alloy_epochs) / alloy_cpu if alloy_cpu > 0 else None
record = {
    "record": "round", "round": round_, "rounds": rounds, "model": model, "variant": variant,
    "threads": threads,
    "epochs": epochs,
    "torch": torch_end.get("torch"), "pytorch_blas_core": torch_end.get("blas_core"),
    "pytorch_env": torch_env,
    "pytorch_images_per_second": torch_ips, "alloy_images_per_second": alloy_ips,
    "ratio_alloy_over_pytorch": alloy_ips / torch_ips,
    "pytorch_cpu_seconds": torch_cpu, "alloy_cpu_seconds": alloy_cpu,
    "pytorch_images_per_cpu_second": torch_ipc, "alloy_images_per_cpu_second": alloy_ipc,
    "cpu_ratio_alloy_over_pytorch": ratio(alloy_ipc, torch_ipc),
    "pytorch_test_acc": torch_epochs[-1]["test_acc"],
    "alloy_test_acc": alloy_epochs[-1]["test_acc"],
}
if variant == "ema":
    record["pytorch_test_acc_ema"] = torch_epochs[-1]["test_acc_ema"]
    record["alloy_test_acc_ema"] = alloy_epochs[-1]["test_acc_ema"]
with open(records, "a") as file:
    print(json.dumps(record), file=file)
digits = {"ratio_alloy_over_pytorch": 3, "cpu_ratio_alloy_over_pytorch": 3,
          "pytorch_test_acc": None, "alloy_test_acc": None,  # None: as measured
          "pytorch_test_acc_ema": None, "alloy_test_acc_ema": None}
print(json.dumps({key: round(value, digits.get(key, 1))
                  if isinstance(value, float) and digits.get(key, 1) is not None else value
                  for key, value in record.items()}), flush=True)
print(f"round {round_}/{rounds}, {variant}: PyTorch ({torch_env}) {torch_ips:.0f} images/s, Alloy {alloy_ips:.0f} "
      f"images/s, Alloy/PyTorch {alloy_ips / torch_ips:.2f}x (per CPU second: {fmt(torch_ipc)} "
      f"vs {fmt(alloy_ipc)}, {fmt(ratio(alloy_ipc, torch_ipc), 2, 'x')}); test accuracy "
      f"PyTorch {record['pytorch_test_acc']:.4f}, Alloy {record['alloy_test_acc']:.4f}"
      + (f" (averages: PyTorch {record['pytorch_test_acc_ema']:.4f}, Alloy "
         f"{record['alloy_test_acc_ema']:.4f})" if variant == "ema" else ""),
      file=sys.stderr)
EOF
done

if [[ "$variants" == base ]]; then
  summarize_rounds "" "model threads epochs rounds torch" 0 test_acc "test accuracy" |
    tee "$out/summaries.jsonl"
else
  summarize_rounds variant "model variant threads epochs rounds torch" 0 test_acc \
    "test accuracy" | tee "$out/summaries.jsonl"
fi
save_records "$results" "$invocation" "$out/rounds.jsonl" "$out/summaries.jsonl"
[[ "$variants" != base ]] || exit 0
[[ ",$variants," == *,base,* ]] || exit 0 # a lone variant: no base to compare with
"$python" - "$out/summaries.jsonl" <<'EOF'
import json
import sys

summaries = {s["variant"]: s for s in map(json.loads, open(sys.argv[1]))}
base = summaries["base"]
overhead = {"record": "overhead"}
for variant, s in summaries.items():
    if variant == "base":
        continue
    for framework in ("pytorch", "alloy"):
        key = f"{framework}_images_per_second_median"
        overhead[f"{framework}_{variant}"] = round(s[key] / base[key], 3)
print(json.dumps(overhead))
print("images/s of each variant over base: " + "; ".join(
    f"{v}: PyTorch {overhead[f'pytorch_{v}']:.3f}x, Alloy {overhead[f'alloy_{v}']:.3f}x"
    for v in summaries if v != "base"), file=sys.stderr)
EOF
