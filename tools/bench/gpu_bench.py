#!/usr/bin/env python3
"""Alloy against PyTorch at its defaults and at its best, on one GPU (tools/bench/gpu_vs_pytorch.sh
runs this; its --help is this text).

  gpu_vs_pytorch.sh [--parts lenet,resnet18,resnet50,gpt2] [--rows GLOB,...] [--rounds R]
      [--device cuda|cpu] [--alloy PATH] [--python PATH] [--data-dir DIR] [--out DIR]
      [--time-budget S] [--run-timeout S] [--compile-cap S] [--commit TEXT]
      [--results-dir DIR | --write-results] [--tar FILE] [--dry-run]

Parts (each runs alone; default lenet,resnet18, or $ALLOY_BENCH_PARTS):
  lenet     the LeNet recipe, 28x28x1, batch 256, SGD lr 0.2; Alloy `train --model lenet` at O0
            and O2 on Fashion-MNIST (random bytes of its shape where --data-dir lacks it).
  resnet18  28x28x1, batch 256, SGD lr 0.01 momentum 0.9; Alloy's CIFAR-style stem and its
            PyTorch twin (tools/bench/resnet18_pytorch.py); Alloy on its synthetic set.
  resnet50  224x224x3, 1000 classes, batch 256, SGD lr 0.1 momentum 0.9,
            torchvision.models.resnet50(); Alloy on 5120 synthetic images, 3 epochs.
  gpt2      GPT-2 124M (nanoGPT's architecture), context 1024, random tokens, AdamW; Alloy
            `train --model gpt2 --steps 30` (a row says "not built" while Alloy lacks it).

Rows. PyTorch (tools/bench/torch_bench.py, a fresh process per run) at its defaults
(cudnn.benchmark off, PyTorch's TF32 default: cuDNN convolutions TF32, matmuls highest; NCHW;
the optimizer's default foreach implementation) and at its best (cudnn.benchmark on,
channels-last, fused SGD/AdamW), fp32 with the default TF32 setting and with TF32 off, fp16
autocast + GradScaler, bf16 autocast, torch.compile modes max-autotune and reduce-overhead, and a
hand-captured CUDA graph of the whole step; each labelled with its settings (--dry-run lists
them, one per line, with an estimate of each part's device seconds). Every run warms up first
(compile_seconds and warmup_seconds are reported apart from the timed steps); a compilation past
--compile-cap seconds ends the row as "compile-cap". Alloy: `alloy train` at O0, O0
--allow-tf32, O2 (fp16) and O2 --half-dtype bf16 (lenet: O0 and O2; gpt2: O2 bf16 and fp16,
and O2 bf16 with --attention-kernel alloy and cudnn, Alloy's attention kernel against cuDNN's);
its figure is the mean images_per_second of the epoch events after the first (the first is its
warm-up), gpt2's the end event's tokens_per_second.

Protocol: --rounds rounds (default 3) of three tiers of rows, all the rounds of a tier before the
next: first Alloy's rows and the PyTorch rows its goals compare against, then the other eager rows,
then the compiled ones, so that a time budget cuts the extras first and leaves the goals their
rounds. Within a round the parts take turns, PyTorch first in odd rounds and Alloy first (rows
reversed) in even ones. Per row: the median over the rounds and the range; per comparison: the
ratio of the medians and the range of the per-round ratios ("best mixed precision": the best
PyTorch fp16/bf16 row of each round, of those that ran in it). No run starts once --time-budget
seconds (0: none) are spent; each run has --run-timeout seconds (compile rows: --compile-cap more).
Everything is written whatever stops the script.

Output, under --out (default gpu-bench-<UTC time>): runs.jsonl (every run's raw record, appended
as it ends), logs/ (each run's output), facts.json, summary.jsonl and gpu_bench.md (rewritten
after every part), and with --tar FILE a tarball of the folder after every part.
--results-dir DIR (--write-results: docs/results) appends to DIR/gpu_<part>.jsonl one line per
row and round and one per comparison, with the machine facts, for tools/results/render.py.

--device cpu rehearses the pipeline with tiny sizes: rows that need CUDA (fp16/bf16, cuDNN's
benchmark, TF32, fused optimizers, torch.compile, CUDA graphs) report "skipped" with the reason.

Exit status: 0 every run ok, skipped, not built or cut by the budget; 1 a run failed, timed out
or left unreadable output, or a setup error (no torch at --python); 2 a usage error; 77 --device
cuda and torch sees no usable CUDA device.
"""

import argparse
import atexit
import fnmatch
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PARTS = ("lenet", "resnet18", "resnet50", "gpt2")
PEAK_FLOPS = 989.4e12  # torch_bench.py's: dense fp16/bf16 of an H100/H200 SXM

# --- the rows ----------------------------------------------------------------------------------

BASE = {"precision": "fp32", "tf32": "default", "cudnn_benchmark": "off", "layout": "nchw",
        "optimizer": "default", "compile": "none", "cuda_graph": False}
BEST = {"cudnn_benchmark": "on", "layout": "channels-last", "optimizer": "fused"}
# fp16 keeps the foreach SGD: fused SGD with momentum under a GradScaler turns the weights to NaN
# once the scaler has skipped the first steps for overflow (it starts at 65536, which ResNet-50's
# first steps overflow), while foreach SGD and fused AdamW train on.
FP16_BEST = {**BEST, "optimizer": "default"}
CNN_ROWS = [
    ("fp32-defaults", {}),
    ("fp32-tf32-off", {"tf32": "off"}),
    ("fp32-best", dict(BEST)),
    ("fp16-defaults", {"precision": "fp16"}),
    ("fp16-nchw-best", {"precision": "fp16", **FP16_BEST, "layout": "nchw"}),
    ("fp16-best", {"precision": "fp16", **FP16_BEST}),
    ("bf16-best", {"precision": "bf16", **BEST}),
    ("bf16-compile-max-autotune", {"precision": "bf16", **BEST, "compile": "max-autotune"}),
    ("bf16-compile-reduce-overhead", {"precision": "bf16", **BEST, "compile": "reduce-overhead"}),
    ("bf16-cuda-graph", {"precision": "bf16", **BEST, "cuda_graph": True}),
]
GPT = {"tf32": "on", "optimizer": "fused"}  # nanoGPT's: TF32 for what autocast leaves in fp32
GPT_ROWS = [
    ("fp32-defaults", {}),
    ("fp32-eager", dict(GPT)),
    ("bf16-eager", {"precision": "bf16", **GPT}),
    ("bf16-eager-v50304", {"precision": "bf16", **GPT, "vocab": 50304}),
    ("bf16-compile-default", {"precision": "bf16", **GPT, "compile": "default"}),
    ("bf16-compile-max-autotune", {"precision": "bf16", **GPT, "compile": "max-autotune"}),
    ("bf16-compile-default-v50304", {"precision": "bf16", **GPT, "compile": "default",
                                     "vocab": 50304}),
    ("bf16-compile-default-b32", {"precision": "bf16", **GPT, "compile": "default",
                                  "batch_size": 32}),
    ("fp16-eager", {"precision": "fp16", **GPT}),
]
ALLOY_LEVELS = {
    "O0": (["--opt-level", "O0"], "fp32, TF32 off"),
    "O0-tf32": (["--opt-level", "O0", "--allow-tf32"], "fp32, TF32 allowed"),
    "O2": (["--opt-level", "O2"], "fp16 model, fp32 masters, dynamic loss scale"),
    "O2-bf16": (["--opt-level", "O2", "--half-dtype", "bf16"], "bf16 model, fp32 masters"),
    "O2-fp16": (["--opt-level", "O2", "--half-dtype", "fp16"],
                "fp16 model, fp32 masters, dynamic loss scale"),
    # The two attention kernels on one device in one call (core/ops/attention_kernel.h).
    "O2-bf16-attn-alloy": (["--opt-level", "O2", "--half-dtype", "bf16", "--attention-kernel",
                            "alloy"], "bf16 model, fp32 masters, Alloy's attention kernel"),
    "O2-bf16-attn-cudnn": (["--opt-level", "O2", "--half-dtype", "bf16", "--attention-kernel",
                            "cudnn"], "bf16 model, fp32 masters, cuDNN's fused attention"),
}
ALLOY_ROWS = {"lenet": ["O0", "O2"], "resnet18": ["O0", "O0-tf32", "O2", "O2-bf16"],
              "resnet50": ["O0", "O0-tf32", "O2", "O2-bf16"],
              "gpt2": ["O2-bf16", "O2-fp16", "O2-bf16-attn-alloy", "O2-bf16-attn-cudnn"]}
# Comparisons: (key, Alloy row, baseline: a PyTorch row or a "best-..." choice, goal).
COMPARISONS = {
    "lenet": [("alloy_O0_vs_fp32_tf32_off", "O0", "fp32-tf32-off", 5.0),
              ("alloy_O0_vs_best", "O0", "best-any", None),
              ("alloy_O2_vs_best_mixed", "O2", "best-mixed", None)],
    "resnet18": [("alloy_O0_vs_fp32_tf32_off", "O0", "fp32-tf32-off", 1.0),
                 ("alloy_O0_tf32_vs_fp32_defaults", "O0-tf32", "fp32-defaults", 1.0),
                 ("alloy_O2_vs_best_mixed", "O2", "best-mixed", 1.2),
                 ("alloy_O2_bf16_vs_best_mixed", "O2-bf16", "best-mixed", None)],
    "resnet50": [("alloy_O0_vs_fp32_tf32_off", "O0", "fp32-tf32-off", None),
                 ("alloy_O0_tf32_vs_fp32_defaults", "O0-tf32", "fp32-defaults", 1.0),
                 ("alloy_O2_vs_best_mixed", "O2", "best-mixed", 1.1),
                 ("alloy_O2_bf16_vs_best_mixed", "O2-bf16", "best-mixed", None)],
    "gpt2": [("alloy_O2_bf16_vs_best_bf16", "O2-bf16", "best-bf16", None),
             ("alloy_O2_bf16_vs_bf16_eager", "O2-bf16", "bf16-eager", None),
             ("alloy_O2_fp16_vs_fp16_eager", "O2-fp16", "fp16-eager", None)],
}
BEST_LABELS = {"best-any": "the fastest PyTorch row of each round",
               "best-mixed": "the fastest PyTorch fp16/bf16 row of each round",
               "best-bf16": "the fastest PyTorch bf16 row of each round at batch 16, vocab 50257"}

# The sizes of each part: a GPU measurement, and a CPU rehearsal that only proves the pipeline.
SIZES = {
    "cuda": {"lenet": {"batch_size": 256, "warmup_steps": 50, "steps": 470, "epochs": 4},
             "resnet18": {"batch_size": 256, "warmup_steps": 50, "steps": 100, "epochs": 3},
             "resnet50": {"batch_size": 256, "warmup_steps": 15, "steps": 30, "epochs": 3,
                          "image_size": 224, "synthetic_size": 5120},
             "gpt2": {"batch_size": 16, "warmup_steps": 5, "steps": 20, "block_size": 1024,
                      "alloy_steps": 30}},
    "cpu": {"lenet": {"batch_size": 8, "warmup_steps": 2, "steps": 3, "epochs": 3, "pool": 64},
            "resnet18": {"batch_size": 8, "warmup_steps": 1, "steps": 2, "epochs": 2},
            "resnet50": {"batch_size": 2, "warmup_steps": 1, "steps": 1, "epochs": 2,
                         "image_size": 64, "synthetic_size": 4},
            "gpt2": {"batch_size": 1, "warmup_steps": 1, "steps": 1, "block_size": 64,
                     "alloy_steps": 2}},
}
# Rough device seconds of one run on an H200 (process start included), for --dry-run's estimate:
# eager fp32, eager mixed, Alloy, and what torch.compile's default and reduce-overhead modes add
# (max-autotune: the whole --compile-cap, which it may well need). From single runs of each kind,
# several at once on one GPU: rough.
ESTIMATE = {"lenet": (12, 12, 8, 15), "resnet18": (12, 20, 12, 40),
            "resnet50": (15, 30, 25, 70), "gpt2": (20, 17, 15, 40)}


def pytorch_rows(part):
    rows = GPT_ROWS if part == "gpt2" else CNN_ROWS
    return [(name, {**BASE, **settings}) for name, settings in rows]


def describe(part, s, batch):
    """A PyTorch row's settings in words: its label."""
    precision = {"fp32": "fp32", "fp16": "fp16 autocast + GradScaler",
                 "bf16": "bf16 autocast, no scaler"}[s["precision"]]
    tf32 = {"default": "TF32 PyTorch default (cuDNN conv TF32, matmul highest)",
            "off": "TF32 off (conv and matmul)", "on": "TF32 on (conv and matmul)"}[s["tf32"]]
    words = [f"PyTorch {precision}", tf32]
    if part != "gpt2":
        words += [f"cudnn.benchmark {s['cudnn_benchmark']}",
                  "channels-last" if s["layout"] == "channels-last" else "NCHW"]
    optimizer = "AdamW" if part == "gpt2" else "SGD"
    words.append(f"{optimizer} fused" if s["optimizer"] == "fused"
                 else f"{optimizer} default (foreach)")
    words.append("eager" if s["compile"] == "none" else f"torch.compile mode {s['compile']}")
    if s["cuda_graph"]:
        words.append("hand-captured CUDA graph of the whole step")
    if part == "gpt2":
        words += ["SDPA", f"vocab {s.get('vocab', 50257)}"]
    words.append(f"batch {s.get('batch_size', batch)}")
    return ", ".join(words)


def alloy_command(args, part, level, log):
    size = SIZES[args.device][part]
    common = ["--device", args.device, "--batch-size", str(size["batch_size"]), "--seed", "1",
              *ALLOY_LEVELS[level][0], "--log-json", log]
    if part == "lenet":
        return [args.alloy, "train", "--model", "lenet", "--epochs", str(size["epochs"]), "--lr",
                "0.2", "--data-dir", args.lenet_data, *common]
    if part == "resnet18":
        data = (["--dataset", "synthetic"] if args.device == "cuda"
                else ["--dataset", "fashion-mnist", "--data-dir", args.lenet_data])
        return [args.alloy, "train", "--model", "resnet18", *data, "--epochs", str(size["epochs"]),
                "--lr", "0.01", "--momentum", "0.9", *common]
    if part == "resnet50":
        return [args.alloy, "train", "--model", "resnet50", "--dataset", "synthetic",
                "--image-size", str(size["image_size"]), "--channels", "3", "--num-classes",
                "1000", "--synthetic-size", str(size["synthetic_size"]), "--epochs",
                str(size["epochs"]), "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9",
                *common]
    return [args.alloy, "train", "--model", "gpt2", "--dataset", "synthetic", "--steps",
            str(size["alloy_steps"]), "--optimizer", "adamw", *common]


def pytorch_command(args, part, settings, cap):
    size = SIZES[args.device][part]
    command = [args.python, os.path.join(HERE, "torch_bench.py"), "run", "--workload", part,
               "--device", args.device, "--batch-size",
               str(settings.get("batch_size", size["batch_size"])),
               "--precision", settings["precision"], "--tf32", settings["tf32"],
               "--cudnn-benchmark", settings["cudnn_benchmark"], "--layout", settings["layout"],
               "--optimizer", settings["optimizer"], "--compile", settings["compile"],
               "--warmup-steps", str(size["warmup_steps"]), "--steps", str(size["steps"]),
               "--compile-cap", str(cap)]
    if settings["cuda_graph"]:
        command.append("--cuda-graph")
    if part == "lenet":
        command += ["--data-dir", args.lenet_data]
        if "pool" in size:
            command += ["--pool", str(size["pool"])]
    if part == "resnet50":
        command += ["--image-size", str(size["image_size"])]
    if part == "gpt2":
        command += ["--vocab", str(settings.get("vocab", 50257)), "--block-size",
                    str(size["block_size"])]
    return command


def plan(args):
    """Every row of the chosen parts: dicts with part, side, row, label, settings."""
    rows = []
    for part in args.parts:
        batch = SIZES[args.device][part]["batch_size"]
        for name, settings in pytorch_rows(part):
            rows.append({"part": part, "side": "pytorch", "row": f"pytorch/{name}",
                         "label": describe(part, settings, batch), "settings": settings})
        for level in ALLOY_ROWS[part]:
            flags, words = ALLOY_LEVELS[level]
            rows.append({"part": part, "side": "alloy", "row": f"alloy/{level}",
                         "label": f"Alloy {' '.join(flags)} ({words}), batch {batch}",
                         "settings": {"flags": flags}})
    if args.rows:
        rows = [r for r in rows if any(fnmatch.fnmatch(name, g) for g in args.rows for name in (
            f"{r['part']}/{r['row']}", r["row"], r["row"].split("/")[1]))]
    return rows


def tier_of(row):
    """The order of the rows within a round, so that a time budget cuts the extras first:
    1 Alloy's rows and the PyTorch rows its goals compare against (and the eager best mixed
    precision ones), 2 the other eager rows, 3 the compiled ones (the longest)."""
    s = row["settings"]
    if row["side"] == "alloy":
        return 1
    if s["compile"] != "none":
        return 3
    name = row["row"].split("/")[1]
    baselines = {c[2] for c in COMPARISONS[row["part"]]}
    return 1 if name in baselines or name in ("fp16-best", "bf16-best", "bf16-eager") else 2


def estimate(row, cap):
    """Rough device seconds of one run (--dry-run's estimate)."""
    fp32, mixed, alloy, compile_ = ESTIMATE[row["part"]]
    if row["side"] == "alloy":
        return alloy * (2 if "O0" in row["row"] else 1)
    s = row["settings"]
    seconds = fp32 if s["precision"] == "fp32" else mixed
    if s["compile"] != "none":
        seconds += cap if s["compile"] == "max-autotune" else min(cap, compile_)
    return seconds


# --- running -----------------------------------------------------------------------------------

def json_lines(path):
    records = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return records


def alloy_figure(part, log):
    """(value, unit, extra) of an Alloy run's --log-json, or raises ValueError."""
    events = json_lines(log)
    start = next((e for e in events if e.get("event") == "start"), {})
    if part == "gpt2":
        end = [e for e in events if e.get("event") == "end" and "tokens_per_second" in e]
        if not end:
            raise ValueError("no end event with tokens_per_second")
        return end[-1]["tokens_per_second"], "tokens/s", {
            "cuda_graph": start.get("cuda_graph"),
            "attention_kernel": start.get("attention_kernel")}
    epochs = [e for e in events if e.get("event") == "epoch"]
    if len(epochs) < 2:
        raise ValueError(f"{len(epochs)} epoch events, need 2 or more (the first is warm-up)")
    timed = [e["images_per_second"] for e in epochs[1:]]
    return statistics.mean(timed), "images/s", {
        "epoch_images_per_second": timed, "cuda_graph": start.get("cuda_graph"),
        "opt_level": start.get("opt_level"), "loss_scale": epochs[-1].get("loss_scale"),
        "skipped_steps": epochs[-1].get("skipped_steps"), "loss": epochs[-1].get("loss")}


def run_one(args, row, round_, limit):
    """Runs one row once; returns its raw record."""
    stem = f"{row['part']}-{row['row'].replace('/', '-')}-r{round_}"
    logs = os.path.join(args.out, "logs")
    stdout, stderr = os.path.join(logs, stem + ".out"), os.path.join(logs, stem + ".err")
    record = {"record": "run", "part": row["part"], "row": row["row"], "side": row["side"],
              "label": row["label"], "round": round_, "stdout": os.path.relpath(stdout, args.out),
              "stderr": os.path.relpath(stderr, args.out)}
    compiles = row["side"] == "pytorch" and row["settings"]["compile"] != "none"
    if row["side"] == "alloy":
        if not (os.path.isfile(args.alloy) and os.access(args.alloy, os.X_OK)):
            record.update(status="skipped", reason=f"no alloy at {args.alloy}")
            return record
        log = os.path.join(logs, stem + ".jsonl")
        record["log_json"] = os.path.relpath(log, args.out)
        command = alloy_command(args, row["part"], row["row"].split("/")[1], log)
        env = os.environ.copy()
    else:
        if not args.torch_ok:
            record.update(status="skipped", reason=args.torch_error)
            return record
        # The cap is on compilation; an eager row's warm-up has the run's limit alone.
        cap = max(5, min(args.compile_cap, limit - 20)) if compiles else limit + 60
        command = pytorch_command(args, row["part"], row["settings"], cap)
        # PyTorch loads the cuDNN and cuBLAS of its own wheels; a path set for Alloy's libraries
        # makes it load others and refuse to start.
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_LIBRARY_PATH", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    record["command"] = shlex.join(command)
    began = time.monotonic()
    with open(stdout, "w") as out, open(stderr, "w") as err:
        try:
            process = subprocess.Popen(command, stdout=out, stderr=err, env=env,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as error:
            record.update(status="failed", reason=f"cannot start: {error}")
            return record
        try:
            rc = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            rc = None
    record["seconds"] = round(time.monotonic() - began, 1)
    if rc is None:
        record.update(status="timed out", reason=f"past its limit of {limit:.0f} s"
                      + (" (compilation included)" if compiles else ""), exit=None)
        return record
    record["exit"] = rc
    if row["side"] == "alloy":
        if rc == 2:
            first = next((line.strip() for line in open(stderr, errors="replace")
                          if line.strip()), "")
            record.update(status="not built", reason=f"alloy refused the command: {first}"[:500])
        elif rc != 0:
            record.update(status="failed", reason=f"exit {rc}: {tail(stderr)}")
        else:
            try:
                value, unit, extra = alloy_figure(row["part"], log)
                record.update(status="ok", value=value, unit=unit, **extra)
            except (ValueError, KeyError, TypeError) as error:
                record.update(status="unreadable", reason=str(error))
        return record
    lines = json_lines(stdout)
    if not lines:
        record.update(status="failed" if rc else "unreadable",
                      reason=f"exit {rc}, no JSON line: {tail(stderr)}")
        return record
    result = lines[-1]
    record["pytorch"] = result
    record["status"] = result.get("status", "unreadable")
    if result.get("reason"):
        record["reason"] = result["reason"]
    if record["status"] == "ok":
        gpt = row["part"] == "gpt2"
        record.update(value=result["tokens_per_second" if gpt else "images_per_second"],
                      unit="tokens/s" if gpt else "images/s",
                      compile_seconds=result.get("compile_seconds"),
                      warmup_seconds=result.get("warmup_seconds"))
    return record


def tail(path, lines=2):
    try:
        with open(path, errors="replace") as f:
            return " | ".join(line.strip() for line in f.readlines()[-lines:])[-400:]
    except OSError:
        return ""


# --- summaries ---------------------------------------------------------------------------------

def median_range(values):
    return (statistics.median(values), min(values), max(values)) if values else (None,) * 3


def summarize(args, rows, runs):
    """(row summaries, comparison summaries) over the rounds so far."""
    by = {}
    for run in runs:
        by.setdefault((run["part"], run["row"]), {})[run["round"]] = run
    row_summaries = []
    for row in rows:
        done = by.get((row["part"], row["row"]), {})
        values = [r["value"] for r in done.values() if r.get("status") == "ok"]
        med, low, high = median_range(values)
        summary = {"record": "row", "part": row["part"], "row": row["row"], "label": row["label"],
                   "median": med, "min": low, "max": high, "rounds_ok": len(values),
                   "unit": "tokens/s" if row["part"] == "gpt2" else "images/s",
                   "statuses": sorted({r["status"] for r in done.values()}),
                   "reasons": sorted({r["reason"] for r in done.values() if r.get("reason")})}
        compiles = [r["compile_seconds"] for r in done.values()
                    if r.get("compile_seconds") is not None]
        if compiles:
            summary["compile_seconds_median"] = statistics.median(compiles)
        if row["part"] == "resnet50" and med is not None and args.device == "cuda":
            summary["share_of_fp16_peak"] = med * 3 * 4.1e9 / PEAK_FLOPS
        mfus = [r["pytorch"]["mfu"] for r in done.values()
                if r.get("status") == "ok" and "mfu" in r.get("pytorch", {})]
        if args.device != "cuda":
            pass  # a share of a GPU's peak means nothing in the CPU rehearsal
        elif mfus:
            summary["mfu"] = statistics.median(mfus)
        elif row["part"] == "gpt2" and med is not None:
            summary["mfu"] = med * gpt2_flops_per_token(args) / PEAK_FLOPS
        row_summaries.append(summary)
    comparisons = []
    present = {(r["part"], r["row"]) for r in rows}
    for part in args.parts:
        for key, alloy, baseline, goal in COMPARISONS[part]:
            if (part, f"alloy/{alloy}") not in present:
                continue
            candidates = best_candidates(part, baseline, rows)
            if not candidates:
                continue
            rounds = sorted({r["round"] for r in runs if r["part"] == part})
            pairs = []
            for n in rounds:
                subject = by.get((part, f"alloy/{alloy}"), {}).get(n)
                options = [(by[(part, c)][n]["value"], c) for c in candidates
                           if n in by.get((part, c), {}) and by[(part, c)][n].get("status") == "ok"]
                if subject and subject.get("status") == "ok" and options:
                    pairs.append((n, subject["value"], *max(options)))
            label = BEST_LABELS.get(baseline) or next(
                r["label"] for r in rows if r["part"] == part and r["row"] == candidates[0])
            summary = {"record": "comparison", "part": part, "comparison": key,
                       "subject": f"alloy/{alloy}", "baseline": baseline if baseline in BEST_LABELS
                       else f"pytorch/{baseline}", "baseline_label": label, "goal": goal,
                       "rounds": len(pairs), "ratio_of_medians": None, "met": None}
            if pairs:
                subject_median = statistics.median(p[1] for p in pairs)
                baseline_median = statistics.median(p[2] for p in pairs)
                ratios = [p[1] / p[2] for p in pairs]
                ratio = subject_median / baseline_median
                summary.update(subject_median=subject_median, baseline_median=baseline_median,
                               ratio_of_medians=ratio, round_ratio_min=min(ratios),
                               round_ratio_max=max(ratios),
                               baseline_rows=[p[3] for p in pairs],
                               met=None if goal is None else ratio >= goal)
            comparisons.append(summary)
    return row_summaries, comparisons


def best_candidates(part, baseline, rows):
    mine = [r for r in rows if r["part"] == part and r["side"] == "pytorch"]
    if baseline == "best-any":
        return [r["row"] for r in mine]
    if baseline == "best-mixed":
        return [r["row"] for r in mine if r["settings"]["precision"] != "fp32"]
    if baseline == "best-bf16":
        return [r["row"] for r in mine if r["settings"]["precision"] == "bf16"
                and "vocab" not in r["settings"] and "batch_size" not in r["settings"]]
    return [r["row"] for r in mine if r["row"] == f"pytorch/{baseline}"]


def gpt2_flops_per_token(args):
    """nanoGPT's estimate_mfu: 6 N + 12 L d T FLOP per token, N the parameters but the position
    embedding: per block 12 d^2 + 13 d, the tied token embedding V d, the final norm 2 d."""
    layers, width = 12, 768
    block = SIZES[args.device]["gpt2"]["block_size"]
    per_layer = 12 * width * width + 13 * width
    params = layers * per_layer + 50257 * width + 2 * width
    return 6 * params + 12 * layers * width * block


def span(low, high):
    """A range of figures, in the precision of number()."""
    return f"{low:,.0f}-{high:,.0f}" if high >= 100 else f"{low:.3g}-{high:.3g}"


def number(x, unit):
    if x is None:
        return "n/a"
    return f"{x:,.0f} {unit}" if x >= 100 else f"{x:.3g} {unit}"


def markdown(args, facts, rows, runs, row_summaries, comparisons, final):
    lines = ["# Alloy vs PyTorch on one GPU (tools/bench/gpu_vs_pytorch.sh)", ""]
    if args.device == "cpu":
        lines += ["**CPU rehearsal: not a measurement.** Tiny sizes; rows that need CUDA are "
                  "skipped. The figures say nothing about speed.", ""]
    if not final:
        lines += ["*Partial: the script has not finished.*", ""]
    lines += [f"- date (UTC): {facts['date']}", f"- GPU: {facts.get('gpu')}, driver "
              f"{facts.get('driver')}", f"- torch {facts.get('torch')}, CUDA "
              f"{facts.get('torch_cuda')}, cuDNN {facts.get('cudnn')}, torchvision "
              f"{facts.get('torchvision')}", f"- Alloy: `{args.alloy}`: {facts.get('alloy')}",
              f"- commit: {facts['commit']}", f"- command: `{facts['command']}`",
              f"- rounds: {facts['rounds']}; parts: {','.join(args.parts)}", ""]
    lines += ["## Comparisons (ratio: Alloy median / baseline median)", "",
              "| part | comparison | Alloy median | baseline | baseline median | ratio of medians"
              " | per-round ratios | goal | met |", "|---|---|---:|---|---:|---:|---|---|---|"]
    for c in comparisons:
        unit = "tokens/s" if c["part"] == "gpt2" else "images/s"
        ratio = c["ratio_of_medians"]
        lines.append(
            f"| {c['part']} | {c['subject']} | {number(c.get('subject_median'), unit)} | "
            f"{c['baseline_label']} | {number(c.get('baseline_median'), unit)} | "
            + ("n/a" if ratio is None else f"**{ratio:.2f}x**") + " | "
            + ("n/a" if ratio is None else f"{c['round_ratio_min']:.2f}x-"
               f"{c['round_ratio_max']:.2f}x ({c['rounds']} rounds)") + " | "
            + ("-" if c["goal"] is None else f">= {c['goal']:g}x") + " | "
            + ("-" if c["met"] is None else ("**yes**" if c["met"] else "**no**")) + " |")
    lines += ["", "## Rows (median over the rounds, range)", "",
              "| part | row | settings | median | range | rounds ok | compile s | "
              "share of peak / MFU | status |", "|---|---|---|---:|---|---:|---:|---:|---|"]
    for s in row_summaries:
        peak = s.get("share_of_fp16_peak", s.get("mfu"))
        status = ", ".join(s["statuses"]) + ("".join(f"; {r}" for r in s["reasons"][:2]))
        lines.append(
            f"| {s['part']} | {s['row']} | {s['label']} | {number(s['median'], s['unit'])} | "
            + ("n/a" if s["median"] is None else span(s["min"], s["max"])) + " | "
            f"{s['rounds_ok']} | "
            + (f"{s['compile_seconds_median']:.1f}" if "compile_seconds_median" in s else "-")
            + " | " + ("-" if peak is None else f"{100 * peak:.1f}%") + f" | {status} |")
    lines += ["", "Compile s: the first step of the run (compilation, cuDNN's benchmark, graph "
              "capture), apart from the timed steps; a later round may find PyTorch's compile "
              "cache warm.", "",
              "fp16 rows train with foreach SGD: fused SGD with momentum under a GradScaler "
              "turns the weights to NaN once the scaler has skipped overflowing first steps "
              "(fused AdamW does not).", "",
              "Share of peak: resnet50 images/s x 3 x 4.1 GFLOP over 989.4 TFLOP/s (dense "
              "fp16/bf16, H100/H200 SXM); gpt2 MFU: nanoGPT's estimate, (6 N + 12 L d T) FLOP "
              "per token x tokens/s over the same peak (N: parameters but the position "
              "embedding; L 12, d 768, T 1024).", "", "## Runs", "",
              "| round | part | row | status | seconds | figure | log |",
              "|---|---|---|---|---:|---|---|"]
    for r in runs:
        figure = number(r.get("value"), r.get("unit", "")) if "value" in r else r.get("reason",
                                                                                       "-")
        if r.get("compile_seconds") is not None:
            figure += f"; first step {r['compile_seconds']:.1f} s"
        lines.append(f"| {r['round']} | {r['part']} | {r['row']} | {r['status']} | "
                     f"{r.get('seconds', 0)} | {figure} | `{r['stderr']}` |")
    with open(os.path.join(args.out, "gpu_bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def write_outputs(args, facts, rows, runs, final):
    row_summaries, comparisons = summarize(args, rows, runs)
    markdown(args, facts, rows, runs, row_summaries, comparisons, final)
    with open(os.path.join(args.out, "summary.jsonl"), "w") as f:
        for record in row_summaries + comparisons:
            f.write(json.dumps(record) + "\n")
    if args.tar:
        partial = args.tar + ".part"
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(args.out, arcname=os.path.basename(os.path.normpath(args.out)),
                    filter=lambda info: None if os.path.abspath(os.path.join(
                        os.path.dirname(args.out), info.name)) == os.path.abspath(args.tar)
                    else info)
        os.replace(partial, args.tar)
    return row_summaries, comparisons


def share_of_peak(args, run):
    """A run's share of the dense fp16/bf16 peak: resnet50 at 224 (3 x 4.1 GFLOP an image), gpt2
    (nanoGPT's MFU); None elsewhere, on the CPU and without a figure."""
    if args.device != "cuda" or run.get("status") != "ok":
        return None
    if run["part"] == "resnet50" and SIZES["cuda"]["resnet50"]["image_size"] == 224:
        return run["value"] * 3 * 4.1e9 / PEAK_FLOPS
    if run["part"] == "gpt2":
        return run.get("pytorch", {}).get("mfu") or (
            run["value"] * gpt2_flops_per_token(args) / PEAK_FLOPS)
    return None


def write_results(args, facts, runs, comparisons):
    """Appends this run's records to DIR/gpu_<part>.jsonl: one line per row and round, one per
    comparison, each with the machine facts."""
    common = {key: facts.get(key) for key in ("gpu", "driver", "torch", "torch_cuda", "cudnn",
                                              "date", "commit", "command")}
    common["device"] = args.device
    os.makedirs(args.results_dir, exist_ok=True)
    for part in args.parts:
        lines = []
        for r in runs:
            if r["part"] == part:
                settings = r.get("pytorch", {})
                lines.append({"record": "row", **common, "part": part, "row": r["row"],
                              "label": r["label"], "round": r["round"], "status": r["status"],
                              "value": r.get("value"), "unit": r.get("unit"),
                              "compile_seconds": r.get("compile_seconds"),
                              "share_of_peak": share_of_peak(args, r),
                              "reason": r.get("reason"),
                              "settings": {k: settings.get(k) for k in (
                                  "precision", "tf32", "cudnn_benchmark", "layout", "optimizer",
                                  "compile", "cuda_graph", "batch_size", "vocab")}
                              if settings else {"command": r.get("command")}})
        lines += [{**common, **c} for c in comparisons if c["part"] == part]
        if lines:
            with open(os.path.join(args.results_dir, f"gpu_{part}.jsonl"), "a") as f:
                for line in lines:
                    f.write(json.dumps(line, sort_keys=True) + "\n")


def make_idx(directory, train, test, seed=1):
    """IDX files of random pixels and labels shaped like Fashion-MNIST."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    for prefix, count in (("train", train), ("t10k", test)):
        for kind, magic, shape, payload in (
                ("images-idx3", 0x803, (count, 28, 28), rng.randbytes(count * 28 * 28)),
                ("labels-idx1", 0x801, (count,), bytes(rng.randrange(10) for _ in range(count)))):
            header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in shape)
            with open(os.path.join(directory, f"{prefix}-{kind}-ubyte"), "wb") as f:
                f.write(header + payload)


def has_idx(directory):
    return all(any(os.path.isfile(os.path.join(directory, base + ext)) for ext in ("", ".gz"))
               for base in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                            "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"))


def gather_facts(args):
    facts = {"date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "device": args.device,
             "command": args.command_line, "rounds": args.rounds}
    commit = args.commit
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                                    capture_output=True, text=True, check=True).stdout.strip()
            dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain",
                                    "--untracked-files=no"], capture_output=True,
                                   text=True).stdout.strip()
            commit += " (+ uncommitted changes)" if dirty else ""
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown (no git checkout here: pass --commit)"
    facts["commit"] = commit
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30)
        if smi.returncode == 0 and smi.stdout.strip():
            name, _, driver = smi.stdout.strip().splitlines()[0].partition(", ")
            facts.update(gpu=name, driver=driver)
    except (OSError, subprocess.SubprocessError):
        pass
    if os.path.isfile(args.alloy) and os.access(args.alloy, os.X_OK):
        version = subprocess.run([args.alloy, "--version"], capture_output=True, text=True)
        facts["alloy"] = (version.stdout or version.stderr).strip()
    else:
        facts["alloy"] = f"not found at {args.alloy}"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    try:
        probe = subprocess.run([args.python, os.path.join(HERE, "torch_bench.py"), "facts",
                                "--device", args.device], capture_output=True, text=True,
                               env=env, timeout=300)
        torch_facts = json_lines_text(probe.stdout)
    except (OSError, subprocess.SubprocessError) as error:
        probe, torch_facts = None, None
        args.torch_error = f"cannot run {args.python}: {error}"
    if torch_facts:
        facts.update({k: v for k, v in torch_facts.items() if v is not None or k not in facts})
        args.torch_ok = True
    else:
        args.torch_ok = False
        if probe is not None:
            args.torch_error = (f"no torch: {args.python} torch_bench.py facts said: "
                                f"{probe.stderr.strip()[-300:]}")
    return facts


def json_lines_text(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


class Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr, exit status 2, like alloy's."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)


def parse(argv):
    parser = Parser(prog="gpu_vs_pytorch.sh", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default=os.environ.get("ALLOY_BENCH_PARTS") or
                        "lenet,resnet18")
    parser.add_argument("--rows", default="",
                        help="comma-separated globs of the rows to run, matched against "
                        "PART/SIDE/NAME, SIDE/NAME and NAME (--dry-run lists them), e.g. "
                        "'fp32-*,alloy/*' or 'resnet50/pytorch/bf16-best'")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--alloy", default=os.environ.get("ALLOY")
                        or os.path.join(ROOT, "build", "bin", "alloy"))
    parser.add_argument("--python", default="python3")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--out", default="")
    parser.add_argument("--time-budget", type=float, default=None)
    parser.add_argument("--run-timeout", type=float, default=None)
    parser.add_argument("--compile-cap", type=float, default=180.0)
    parser.add_argument("--commit", default="")
    results = parser.add_mutually_exclusive_group()
    results.add_argument("--results-dir", default="")
    results.add_argument("--write-results", action="store_true")
    parser.add_argument("--tar", default="")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--command-line", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in args.parts if p not in PARTS]
    if bad or not args.parts:
        parser.error(f"--parts (or ALLOY_BENCH_PARTS) must be a comma-separated list of "
                     f"{', '.join(PARTS)}, not '{','.join(args.parts) or 'nothing'}'")
    args.rows = [g for g in args.rows.split(",") if g]
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    if args.time_budget is None:
        args.time_budget = 540 if args.device == "cuda" else 0
    if args.run_timeout is None:
        args.run_timeout = 300 if args.device == "cuda" else 900
    if args.time_budget < 0 or args.run_timeout <= 0 or args.compile_cap <= 0:
        parser.error("--time-budget must be >= 0, --run-timeout and --compile-cap above 0")
    if args.write_results:
        args.results_dir = os.path.join(ROOT, "docs", "results")
    args.command_line = args.command_line or shlex.join(["gpu_vs_pytorch.sh", *argv])
    return args


def dry_run(args, rows):
    totals, tiers = {}, {}
    for row in rows:
        seconds = estimate(row, args.compile_cap)
        totals[row["part"]] = totals.get(row["part"], 0) + seconds
        tiers[row["part"], tier_of(row)] = tiers.get((row["part"], tier_of(row)), 0) + seconds
        print(f"{row['part']}/{row['row']}: {row['label']} (tier {tier_of(row)}, "
              f"~{seconds:.0f} s)")
    for part in args.parts:
        per_round = totals.get(part, 0)
        split = ", ".join(f"tier {t} ~{tiers[part, t]:.0f} s" for t in (1, 2, 3)
                          if (part, t) in tiers)
        print(f"estimate {part}: ~{per_round:.0f} device s per round ({split}), "
              f"~{per_round * args.rounds:.0f} s for {args.rounds} rounds")
    print(f"estimate total: ~{sum(totals.values()) * args.rounds:.0f} device s "
          f"(time budget {args.time_budget:g} s)")


def main(argv):
    args = parse(argv)
    rows = plan(args)
    if not rows:
        sys.exit(f"gpu_vs_pytorch.sh: no row matches --rows {','.join(args.rows)}")
    if args.dry_run:
        dry_run(args, rows)
        return 0
    start = time.monotonic()
    args.out = args.out or f"gpu-bench-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    if args.tar:
        args.tar = os.path.abspath(args.tar)
    args.torch_error = ""
    facts = gather_facts(args)
    if args.device == "cuda" and args.torch_ok and not facts.get("cuda_available"):
        print(f"gpu_vs_pytorch.sh: no usable CUDA device: torch {facts.get('torch')} (CUDA "
              f"{facts.get('torch_cuda')}) says torch.cuda.is_available() is False",
              file=sys.stderr)
        return 77
    if not args.torch_ok:
        print(f"gpu_vs_pytorch.sh: {args.torch_error}: pass --python PATH", file=sys.stderr)
        return 1
    args.lenet_data = args.data_dir
    if args.device == "cpu" or not has_idx(args.data_dir):
        # Outside --out: 47 MB of random bytes would swell its tarball.
        args.lenet_data = tempfile.mkdtemp(prefix="gpu-bench-data-")
        atexit.register(shutil.rmtree, args.lenet_data, True)
        make_idx(args.lenet_data, 16 if args.device == "cpu" else 60000,
                 8 if args.device == "cpu" else 10000)
        facts["lenet_data"] = "random IDX files of Fashion-MNIST's shape: timing only"
    else:
        facts["lenet_data"] = args.data_dir
    with open(os.path.join(args.out, "facts.json"), "w") as f:
        json.dump(facts, f)
        f.write("\n")
    per_round = sum(estimate(r, args.compile_cap) for r in rows)
    print(f"gpu_vs_pytorch.sh: {len(rows)} rows of {','.join(args.parts)}, {args.rounds} rounds: "
          f"~{per_round:.0f} device s a round by the --dry-run estimate; time budget "
          f"{args.time_budget:g} s", file=sys.stderr, flush=True)
    runs = []
    runs_path = os.path.join(args.out, "runs.jsonl")
    open(runs_path, "w").close()
    timed_out = {}  # (part, row): why it is not run again, (part, row, "round"): when
    # Tiers outermost: under a time budget the rows of Alloy's goals get all their rounds first.
    for tier, round_ in [(t, n) for t in (1, 2, 3) for n in range(1, args.rounds + 1)]:
        for part in args.parts:
            mine = [r for r in rows if r["part"] == part and tier_of(r) == tier]
            order = ([r for r in mine if r["side"] == "pytorch"]
                     + [r for r in mine if r["side"] == "alloy"])
            if round_ % 2 == 0:
                order.reverse()
            for row in order:
                left = (args.time_budget - (time.monotonic() - start) if args.time_budget
                        else float("inf"))
                key = (part, row["row"])
                if key in timed_out:
                    record = {"record": "run", "part": part, "row": row["row"], "side":
                              row["side"], "label": row["label"], "round": round_,
                              "status": "skipped", "reason": f"{timed_out[key]} in round "
                              f"{timed_out[key + ('round',)]}", "stderr": "-"}
                elif left < 15:
                    record = {"record": "run", "part": part, "row": row["row"], "side":
                              row["side"], "label": row["label"], "round": round_,
                              "status": "skipped", "reason": f"the time budget of "
                              f"{args.time_budget:g} s is spent", "stderr": "-"}
                else:
                    limit = args.run_timeout
                    if row["side"] == "pytorch" and row["settings"]["compile"] != "none":
                        limit += args.compile_cap
                    record = run_one(args, row, round_, min(limit, left))
                    if record["status"] == "timed out" and left < limit:
                        # Stopped by the budget, not by its own limit: no verdict on the row.
                        record.update(status="cut by the budget", reason=f"the time budget of "
                                      f"{args.time_budget:g} s ran out during the run")
                    elif record["status"] in ("timed out", "compile-cap"):
                        timed_out[key] = record["status"]
                        timed_out[key + ("round",)] = round_
                runs.append(record)
                with open(runs_path, "a") as f:
                    f.write(json.dumps(record) + "\n")
                print(f"tier {tier} round {round_}/{args.rounds} {part} {row['row']}: "
                      f"{record['status']}"
                      + (f" {record['value']:.1f} {record['unit']}" if "value" in record else "")
                      + (f" ({record['reason']})" if record.get("reason") and
                         record["status"] != "ok" else "")
                      + f" [{record.get('seconds', 0)} s]", file=sys.stderr, flush=True)
            write_outputs(args, facts, rows, runs, final=False)
    facts["end_date"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    row_summaries, comparisons = write_outputs(args, facts, rows, runs, final=True)
    for record in row_summaries + comparisons:
        print(json.dumps(record), flush=True)
    if args.results_dir:
        write_results(args, facts, runs, comparisons)
    bad = [r for r in runs if r["status"] in ("failed", "timed out", "unreadable")]
    print(f"gpu_vs_pytorch.sh: {len(runs)} runs in {time.monotonic() - start:.0f} s; "
          f"{len(bad)} failed, timed out or unreadable; summary {args.out}/gpu_bench.md",
          file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
