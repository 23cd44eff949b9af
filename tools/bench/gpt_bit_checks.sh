#!/usr/bin/env bash
# Bit-for-bit checks of GPT training on the CPU at full length, beyond what the tests' few
# steps show: at each level, N steps straight (saving a checkpoint halfway) against N / 2 steps
# resumed from that checkpoint, and a data-parallel run of two ranks (--gpus 2 over Gloo) whose
# ranks must end with the same weights. Prints each run's params_digest and OK or MISMATCH per
# check; exits 1 on any mismatch.
#
#   tools/bench/gpt_bit_checks.sh DATA_FILE [--steps N] [--levels O0,O2-bf16] [--alloy PATH]
#                                 [--keep DIR]
#
# DATA_FILE: a text (tiny Shakespeare, say). Defaults: 2000 steps, O0 and O2 with bf16,
# build/bin/alloy. The model is small (2 layers, 2 heads, 64 wide, context 64, batch 8) with
# dropout 0.1, so that the resumed run must also draw the same dropout masks, under AdamW with
# warmup, cosine decay and clipping, so that it must also continue the schedule and the moments.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$here/tools/bench/rounds.sh"
steps=2000
levels=O0,O2-bf16
alloy="$here/build/bin/alloy"
keep=""
data=""
python=python3

while (($#)); do
  case "$1" in
    --steps | --levels | --alloy | --keep)
      (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --steps) steps="$2"; shift 2 ;;
    --levels) levels="$2"; shift 2 ;;
    --alloy) alloy="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h | --help) print_help; exit 0 ;;
    -*) usage_error "unknown argument '$1'" ;;
    *) [[ -z "$data" ]] || usage_error "one DATA_FILE, not '$data' and '$1'"; data="$1"; shift ;;
  esac
done
[[ -n "$data" && -f "$data" ]] || usage_error "DATA_FILE (a text file) is missing"
steps=$(integer_at_least --steps "$steps" 2)
((steps % 2 == 0)) || usage_error "--steps must be even (two halves), not $steps"
IFS=, read -r -a level_list <<<"$levels"
for level in "${level_list[@]}"; do
  [[ "$level" =~ ^O[0-3](-bf16|-fp16)?$ ]] || usage_error "--levels: '$level' is not O0..O3[-bf16|-fp16]"
done
require_alloy
make_out_dir

recipe=(train --model gpt --dataset text --data-file "$data" --n-layer 2 --n-head 2 --n-embd 64
  --block-size 64 --batch-size 8 --dropout 0.1 --optimizer adamw --lr 1e-3 --beta2 0.99
  --weight-decay 0.1 --warmup-steps 100 --lr-schedule cosine --min-lr 1e-4 --clip-grad-norm 1
  --device cpu --steps "$steps" --seed 1)

# The end event's field $2 of the JSON log $1.
end_field() {
  "$python" -c 'import json, sys
end = next(e for e in map(json.loads, open(sys.argv[1])) if e.get("event") == "end")
print(end[sys.argv[2]] if not isinstance(end[sys.argv[2]], list) else " ".join(end[sys.argv[2]]))' "$1" "$2"
}

failed=0
verdict() {
  if [[ "$1" == "$2" ]]; then echo "OK"; else echo "MISMATCH"; failed=1; fi
}
half=$((steps / 2))
for level in "${level_list[@]}"; do
  flags=(--opt-level "${level%%-*}")
  [[ "$level" != *-* ]] || flags+=(--half-dtype "${level#*-}")
  dir="$out/$level"
  echo "== $level: $steps steps straight, saving at $half" >&2
  "$alloy" "${recipe[@]}" "${flags[@]}" --threads 2 --checkpoint-dir "$dir" \
    --checkpoint-every "$half" --log-json "$out/$level-straight.jsonl" >&2
  echo "== $level: resumed at $half" >&2
  "$alloy" "${recipe[@]}" "${flags[@]}" --threads 2 \
    --resume "$dir/step-$(printf %08d "$half").ckpt" --log-json "$out/$level-resumed.jsonl" >&2
  straight=$(end_field "$out/$level-straight.jsonl" params_digest)
  resumed=$(end_field "$out/$level-resumed.jsonl" params_digest)
  echo "$level: $steps straight $straight, $half + $half resumed $resumed:" \
    "$(verdict "$straight" "$resumed")"
done

echo "== --gpus 2 on the CPU, O0" >&2
"$alloy" "${recipe[@]}" --opt-level O0 --threads 1 --gpus 2 --master-port 29731 \
  --log-json "$out/ddp.jsonl" >&2
read -r -a ranks <<<"$(end_field "$out/ddp.jsonl" params_digests)"
echo "--gpus 2, O0: rank 0 ${ranks[0]}, rank 1 ${ranks[1]}: $(verdict "${ranks[0]}" "${ranks[1]}")"
exit "$failed"
