#!/usr/bin/env python3
"""The Python side of tools/bench/gpu_vs_pytorch.sh (its header says what is compared and why).

  gpu_bench.py make-data DIR --train N --test M [--seed S]
      IDX files of random pixels and labels shaped like Fashion-MNIST (N train, M test images),
      for timing where the real data set is missing, and for the CPU rehearsal.
  gpu_bench.py facts OUT --mode cuda|cpu [--KEY VALUE ...]
      OUT/facts.json: the machine, versions and settings of the run. Imports torch: exit 1 when
      it cannot, 77 in cuda mode when torch sees no usable CUDA device (the message says why).
  gpu_bench.py summarize OUT (--round R | --final)
      Reads OUT/facts.json, OUT/runs.jsonl and each run's output; writes OUT/gpu_bench.md (after
      every round, so a run cut short still leaves a summary) and prints JSON lines on stdout:
      with --round, one record per comparison of round R; with --final, one summary record per
      comparison, and the results tables in words on stderr (exit 1 if a run that succeeded left
      output that cannot be read).

Needs Python 3.9+; facts needs torch, the rest only the standard library.
"""

import argparse
import json
import os
import random
import statistics
import sys

# What each run is, in the table's words. The CPU rehearsal runs fp32 where AMP would be.
LABELS = {
    "lenet-pytorch": "PyTorch eager, fp32 (TF32 off), data on the device",
    "lenet-alloy": "Alloy O0 (`alloy train --model lenet`)",
    "ffn-pytorch-fp32": "PyTorch eager, fp32 (TF32 off), data on the device",
    "ffn-alloy-O0": "Alloy O0 (`alloy train --model ffn`)",
    "ffn-pytorch-amp": "PyTorch eager, autocast fp16 + GradScaler, data on the device",
    "ffn-alloy-O2": "Alloy O2 (`alloy train --model ffn`)",
    "r18-pytorch-fp32": "PyTorch fp32, TF32 off",
    "r18-pytorch-tf32": "PyTorch fp32, TF32 on",
    "r18-alloy-O0": "Alloy O0",
    "r18-pytorch-amp": "PyTorch autocast fp16 + GradScaler, NCHW",
    "r18-pytorch-amp-cl": "PyTorch autocast fp16 + GradScaler, channels-last",
    "r18-alloy-O2": "Alloy O2 (channels-last on the GPU: --layout auto)",
    "r18-alloy-O2-nchw": "Alloy O2 --layout nchw",
    "r18-pytorch-amp-clip": "PyTorch autocast fp16 + GradScaler + unscale_ + clip_grad_norm_(1.0), "
                            "NCHW",
    "r18-pytorch-amp-cl-clip": "PyTorch autocast fp16 + GradScaler + unscale_ + "
                               "clip_grad_norm_(1.0), channels-last",
    "r18-alloy-O2-clip": "Alloy O2 --clip-grad-norm 1",
}
REHEARSAL_LABELS = {
    "ffn-pytorch-amp": "PyTorch fp32 (rehearsal stand-in for AMP: no AMP on the CPU)",
    "r18-pytorch-amp": "PyTorch fp32 NCHW (rehearsal stand-in for AMP: no AMP on the CPU)",
    "r18-pytorch-amp-cl": "PyTorch fp32 channels-last (rehearsal stand-in for AMP)",
    "r18-pytorch-amp-clip": "PyTorch fp32 + clip_grad_norm_(1.0) NCHW (rehearsal stand-in for "
                            "clipped AMP)",
    "r18-pytorch-amp-cl-clip": "PyTorch fp32 + clip_grad_norm_(1.0) channels-last (rehearsal "
                               "stand-in for clipped AMP)",
}

# The runs of lenet_pytorch.py: the model and whether AMP its end line must name (AMP only on
# the GPU: the CPU rehearsal runs fp32 in its place), so that a run of the wrong recipe is
# unreadable rather than compared.
PYTORCH_EPOCH_RUNS = {"lenet-pytorch": ("lenet", False), "ffn-pytorch-fp32": ("ffn", False),
                      "ffn-pytorch-amp": ("ffn", True)}


def json_lines(path):
    """The JSON objects among a file's lines; other lines (warnings, say) are skipped."""
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


# --- make-data -------------------------------------------------------------------------------

def make_data(args):
    rng = random.Random(args.seed)
    os.makedirs(args.dir, exist_ok=True)
    for prefix, count in (("train", args.train), ("t10k", args.test)):
        files = (("images-idx3", 0x803, (count, 28, 28), rng.randbytes(count * 28 * 28)),
                 ("labels-idx1", 0x801, (count,), bytes(rng.randrange(10) for _ in range(count))))
        for kind, magic, shape, payload in files:
            header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in shape)
            with open(os.path.join(args.dir, f"{prefix}-{kind}-ubyte"), "wb") as f:
                f.write(header + payload)


# --- facts -----------------------------------------------------------------------------------

def facts(args):
    info = {key: value for key, value in vars(args).items() if key not in ("command", "out")}
    try:
        import torch
    except ImportError as error:
        sys.exit(f"gpu_vs_pytorch.sh: cannot import torch with {sys.executable} ({error}): pass "
                 "--python PATH of a Python with PyTorch")
    cuda = torch.cuda.is_available()
    info.update({"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                 "cuda_available": cuda})
    if args.mode == "cuda":
        if not cuda:
            sys.stderr.write(
                f"gpu_vs_pytorch.sh: no usable CUDA device: torch {torch.__version__} (CUDA "
                f"{torch.version.cuda or 'none: a CPU-only build'}) says "
                f"torch.cuda.is_available() is False; nvidia-smi: {args.nvidia_smi}\n")
            sys.exit(77)
        info.update({"torch_device_name": torch.cuda.get_device_name(0),
                     "cudnn": torch.backends.cudnn.version()})
    with open(os.path.join(args.out, "facts.json"), "w") as f:
        json.dump(info, f)
        f.write("\n")


# --- summarize -------------------------------------------------------------------------------

def timed_epochs(events, expected):
    """The figures of a training log's epoch events after the first (the warm-up)."""
    epochs = [e for e in events if e.get("event") == "epoch"]
    if len(epochs) != expected:
        raise ValueError(f"{len(epochs)} epoch events, expected {expected}")
    timed = epochs[1:]
    seconds = sum(e["epoch_seconds"] for e in timed)
    images = sum(e["images_per_second"] * e["epoch_seconds"] for e in timed)
    figure = {"seconds_per_epoch": seconds / len(timed), "images_per_second": images / seconds,
              "timed_epochs": len(timed), "test_acc": epochs[-1].get("test_acc")}
    if "clipped_steps" in timed[0]:  # Alloy's, with --clip-grad-norm; the epochs' mean norms
        norms = [e["grad_norm"] for e in timed if e.get("grad_norm") is not None]
        figure.update({"clipped_steps": sum(e["clipped_steps"] for e in timed),
                       "grad_norm": statistics.mean(norms) if norms else None})
    if "host_waits" in timed[0]:  # Alloy's
        start = next((e for e in events if e.get("event") == "start"), {})
        level = start.get("opt_level")
        steps = sum(epoch["step"] - before["step"] for before, epoch in zip(epochs, timed))
        figure.update({
            "opt_level": level, "cuda_graph": start.get("cuda_graph"),
            "device": start.get("device"), "steps": steps,
            "host_waits": sum(e["host_waits"] for e in timed),
            "backpressure_waits": sum(e["backpressure_waits"] for e in timed),
            "uploads": sum(e["uploads"] for e in timed),
            "downloads": sum(e["downloads"] for e in timed),
            "device_allocations": sum(e["device_allocations"] for e in timed),
            "skipped_steps": epochs[-1].get("skipped_steps"),
            "loss_scale": epochs[-1].get("loss_scale"),
        })
    return figure


def run_figure(out, run, facts):
    """A run's figure (a dict, images_per_second in it), or raises ValueError saying why not."""
    events = json_lines(os.path.join(out, run["output"]))
    if run["name"] in PYTORCH_EPOCH_RUNS:
        figure = timed_epochs(events, facts["epochs"])
        model, amp = PYTORCH_EPOCH_RUNS[run["name"]]
        amp = amp and facts["mode"] == "cuda"
        end = next((e for e in events if e.get("event") == "end"), None)
        if end is None:
            raise ValueError("no end line")
        if end.get("model") != model or end.get("amp", False) != amp:
            raise ValueError(f"the end line says model {end.get('model')}, amp "
                             f"{end.get('amp')}; expected {model}, amp {amp}")
        figure.update({"amp": amp, "loss_scale": end.get("loss_scale")})
        return figure
    if run["name"].startswith(("lenet-", "ffn-")):
        return timed_epochs(events, facts["epochs"])
    if run["name"].startswith("r18-alloy-"):
        return timed_epochs(events, facts["resnet_epochs"])
    lines = [e for e in events if "images_per_second" in e]
    if len(lines) != 1:
        raise ValueError(f"{len(lines)} result lines, expected 1")
    return lines[0]


def load_rounds(out, facts):
    """{round: {run name: run record with "figure" or "error"}} from runs.jsonl."""
    rounds = {}
    for run in json_lines(os.path.join(out, "runs.jsonl")):
        if run["status"] == "ok":
            try:
                run["figure"] = run_figure(out, run, facts)
            except (ValueError, KeyError, TypeError, ZeroDivisionError) as error:
                run["error"] = f"unreadable output ({type(error).__name__}: {error})"
        rounds.setdefault(run["round"], {})[run["name"]] = run
    return rounds


def value(runs, name, key="images_per_second"):
    run = runs.get(name)
    return run["figure"].get(key) if run and "figure" in run else None


# PyTorch AMP in NCHW and in channels-last, without and with clipping: a comparison against
# "best-amp" or "best-amp-clip" takes the better layout of each round.
BEST_OF = {"best-amp": ("r18-pytorch-amp", "r18-pytorch-amp-cl"),
           "best-amp-clip": ("r18-pytorch-amp-clip", "r18-pytorch-amp-cl-clip")}
BEST_LABELS = {
    "best-amp": "the better of the two PyTorch AMP runs in each round (NCHW, channels-last)",
    "best-amp-clip": "the better of the two clipped PyTorch AMP runs in each round (NCHW, "
                     "channels-last)",
}


def best_of(runs, names):
    """The better images/s of these runs in this round: (images/s, run name), or (None, None)."""
    options = [(value(runs, n), n) for n in names]
    options = [o for o in options if o[0] is not None]
    return max(options) if options else (None, None)


def comparisons(facts):
    """The rows of the results tables whose runs are among facts["runs"]. Each reads a round's
    runs: "baseline" and "subject" (a run's name or a key of BEST_OF) give (figure, the run it
    came from); "seconds": the figure is seconds (fewer is faster), else images/s. The speedup
    is how many times faster the subject is. Rows of the "clip_cost" table are each framework's
    clipped runs over its own unclipped ones, a table of their own in gpu_bench.md."""
    labels = dict(LABELS, **(REHEARSAL_LABELS if facts["mode"] == "cpu" else {}), **BEST_LABELS)
    batch = facts["batch_size"]

    def side(name, key):
        if name in BEST_OF:
            return lambda runs: best_of(runs, BEST_OF[name])
        return lambda runs: (value(runs, name, key), name)

    def row(key, title, baseline, subject, goal, clip_cost=False):
        seconds = key.startswith(("lenet_", "ffn_"))
        figure = "seconds_per_epoch" if seconds else "images_per_second"
        return {"key": key, "title": title, "unit": "s/epoch" if seconds else "images/s",
                "needs": set(BEST_OF.get(baseline, (baseline,)) + BEST_OF.get(subject, (subject,))),
                "baseline_label": labels[baseline], "subject_label": labels[subject],
                "baseline": side(baseline, figure), "subject": side(subject, figure),
                "seconds": seconds, "goal": goal,
                "table": "clip_cost" if clip_cost else "results"}

    rows = [
        row("lenet_seconds_per_epoch", f"LeNet b{batch}, seconds per epoch (training only)",
            "lenet-pytorch", "lenet-alloy", 5.0),
        row("ffn_fp32_seconds_per_epoch", f"ffn b{batch} fp32, seconds per epoch (training only)",
            "ffn-pytorch-fp32", "ffn-alloy-O0", 1.0),
        row("ffn_amp_seconds_per_epoch",
            f"ffn b{batch} mixed precision, seconds per epoch (training only)",
            "ffn-pytorch-amp", "ffn-alloy-O2", 1.2),
        row("ffn_alloy_o2_over_o0", f"ffn b{batch}, Alloy O2 over Alloy O0, seconds per epoch",
            "ffn-alloy-O0", "ffn-alloy-O2", None),
        row("resnet18_fp32", f"resnet18 b{batch} fp32", "r18-pytorch-fp32", "r18-alloy-O0", 1.0),
        row("resnet18_fp32_vs_tf32", f"resnet18 b{batch} fp32 against TF32 (extra)",
            "r18-pytorch-tf32", "r18-alloy-O0", None),
        row("resnet18_amp", f"resnet18 b{batch} mixed precision", "best-amp", "r18-alloy-O2", 1.2),
        row("resnet18_amp_vs_nchw", f"resnet18 b{batch} mixed precision against NCHW (extra)",
            "r18-pytorch-amp", "r18-alloy-O2", None),
        row("resnet18_amp_vs_channels_last",
            f"resnet18 b{batch} mixed precision against channels-last (extra)",
            "r18-pytorch-amp-cl", "r18-alloy-O2", None),
        row("alloy_o2_over_o0", f"resnet18 b{batch}, Alloy O2 over Alloy O0", "r18-alloy-O0",
            "r18-alloy-O2", 2.0),
        row("alloy_o2_nhwc_over_nchw",
            f"resnet18 b{batch} mixed precision, Alloy channels-last over its NCHW (extra)",
            "r18-alloy-O2-nchw", "r18-alloy-O2", None),
        row("resnet18_amp_clip", f"resnet18 b{batch} mixed precision, clipped to norm 1",
            "best-amp-clip", "r18-alloy-O2-clip", 1.2),
        row("resnet18_amp_clip_vs_nchw",
            f"resnet18 b{batch} mixed precision, clipped, against NCHW (extra)",
            "r18-pytorch-amp-clip", "r18-alloy-O2-clip", None),
        row("resnet18_amp_clip_vs_channels_last",
            f"resnet18 b{batch} mixed precision, clipped, against channels-last (extra)",
            "r18-pytorch-amp-cl-clip", "r18-alloy-O2-clip", None),
        row("pytorch_amp_clip_cost", f"resnet18 b{batch} mixed precision: PyTorch", "best-amp",
            "best-amp-clip", None, clip_cost=True),
        row("alloy_o2_clip_cost", f"resnet18 b{batch} mixed precision: Alloy O2", "r18-alloy-O2",
            "r18-alloy-O2-clip", None, clip_cost=True),
    ]
    # The rows of the parts that ran (--parts).
    return [r for r in rows if r["needs"] <= set(facts["runs"])]


def speedup(row, baseline, subject):
    return baseline / subject if row["seconds"] else subject / baseline


def round_records(rounds, facts):
    records = []
    for number_ in sorted(rounds):
        runs = rounds[number_]
        for row in comparisons(facts):
            (baseline, baseline_run), (subject, subject_run) = (row["baseline"](runs),
                                                                row["subject"](runs))
            both = baseline is not None and subject is not None and baseline > 0 and subject > 0
            records.append({
                "record": "round", "round": number_, "comparison": row["key"],
                "table": row["table"],
                "unit": row["unit"], "baseline": row["baseline_label"],
                "baseline_run": baseline_run, "baseline_value": baseline,
                "subject": row["subject_label"], "subject_run": subject_run,
                "subject_value": subject,
                "speedup": speedup(row, baseline, subject) if both else None,
                "goal": row["goal"]})
    return records


def summaries(records, facts):
    result = []
    for row in comparisons(facts):
        mine = [r for r in records if r["comparison"] == row["key"]]
        both = [r for r in mine if r["speedup"] is not None]
        summary = {"record": "summary", "comparison": row["key"], "table": row["table"],
                   "title": row["title"],
                   "unit": row["unit"], "baseline": row["baseline_label"],
                   "subject": row["subject_label"], "rounds": len(both),
                   "rounds_missing": len(mine) - len(both), "goal": row["goal"]}
        if both:
            b = statistics.median(r["baseline_value"] for r in both)
            s = statistics.median(r["subject_value"] for r in both)
            ratios = [r["speedup"] for r in both]
            summary.update({"baseline_median": b, "subject_median": s,
                            "speedup_of_medians": speedup(row, b, s),
                            "round_speedup_min": min(ratios), "round_speedup_max": max(ratios),
                            "met": None if row["goal"] is None
                            else speedup(row, b, s) >= row["goal"]})
        result.append(summary)
    return result


def host_wait_rows(rounds):
    """Per Alloy run, over the rounds: host round trips per step of the timed epochs."""
    rows = []
    for name in ("lenet-alloy", "ffn-alloy-O0", "ffn-alloy-O2", "r18-alloy-O0", "r18-alloy-O2",
                 "r18-alloy-O2-nchw", "r18-alloy-O2-clip"):
        figures = [rounds[n][name]["figure"] for n in sorted(rounds)
                   if name in rounds[n] and "figure" in rounds[n][name]]
        steps = sum(f["steps"] for f in figures)
        if not steps:
            continue
        waits = sum(f["host_waits"] for f in figures)
        backpressure = sum(f["backpressure_waits"] for f in figures)
        rows.append({
            "record": "summary", "comparison": f"host_round_trips_{name}", "run": name,
            "opt_level": figures[0]["opt_level"], "rounds": len(figures), "steps": steps,
            "host_waits_per_step": waits / steps,
            "backpressure_waits_per_step": backpressure / steps,
            "other_host_waits_per_step": (waits - backpressure) / steps,
            "host_waits_per_round": [f["host_waits"] for f in figures],
            "uploads_per_step": sum(f["uploads"] for f in figures) / steps,
            "downloads_per_step": sum(f["downloads"] for f in figures) / steps,
            "device_allocations": sum(f["device_allocations"] for f in figures),
            "cuda_graph": [f["cuda_graph"] for f in figures],
            "goal": 0 if "-alloy-O2" in name else None,
        })
    return rows


def number(x, unit):
    """A median in the table's words, with its unit."""
    if x is None:
        return "n/a"
    if unit == "s/epoch":
        return f"{x:.4f} s" if x < 1 else f"{x:.3f} s"
    return f"{x:.0f} images/s" if x >= 100 else f"{x:.2f} images/s"


def verdict(summary):
    if summary.get("speedup_of_medians") is None:
        return "n/a"
    if summary["goal"] is None:
        return "-"
    return "**yes**" if summary["met"] else "**no**"


def per_round(summary, decimals=2):
    """The smallest and largest per-round ratio and the number of rounds, in words."""
    if summary.get("speedup_of_medians") is None:
        return "n/a"
    rounds, missing = summary["rounds"], summary["rounds_missing"]
    low, high = summary["round_speedup_min"], summary["round_speedup_max"]
    return (f"{low:.{decimals}f}x-{high:.{decimals}f}x "
            f"({rounds} round{'' if rounds == 1 else 's'}"
            + (f", {missing} missing" if missing else "") + ")")


def results_table(summary_records):
    lines = ["| comparison | baseline | baseline median | Alloy | Alloy median | "
             "Alloy speedup (of medians) | per round | goal | met |",
             "|---|---|---:|---|---:|---:|---|---|---|"]
    for s in summary_records:
        if s["table"] != "results":
            continue
        unit = s["unit"]
        speed = s.get("speedup_of_medians")
        goal = "-" if s["goal"] is None else f">= {s['goal']:g}x"
        lines.append(f"| {s['title']} | {s['baseline']} | {number(s.get('baseline_median'), unit)}"
                     f" | {s['subject']} | {number(s.get('subject_median'), unit)} | "
                     f"{'n/a' if speed is None else f'**{speed:.2f}x**'} | {per_round(s)} | "
                     f"{goal} | {verdict(s)} |")
    return lines


def clip_cost_table(summary_records):
    """Each framework's clipped images/s over its own unclipped; [] without those rows."""
    mine = [s for s in summary_records if s["table"] == "clip_cost"]
    if not mine:
        return []
    lines = ["| framework | unclipped | unclipped median | clipped | clipped median | "
             "clipped / unclipped (of medians) | per round |",
             "|---|---|---:|---|---:|---:|---|"]
    for s in mine:
        ratio = s.get("speedup_of_medians")
        lines.append(f"| {s['title']} | {s['baseline']} | "
                     f"{number(s.get('baseline_median'), s['unit'])} | {s['subject']} | "
                     f"{number(s.get('subject_median'), s['unit'])} | "
                     f"{'n/a' if ratio is None else f'**{ratio:.3f}x**'} | {per_round(s, 3)} |")
    return lines


def host_table(rows):
    """The goal (0 a step, O2 only) applies to the host waits other than back-pressure."""
    lines = ["| Alloy run | level | steps (timed epochs, all rounds) | host waits / step | "
             "of which back-pressure | other host waits / step (the goal's) | uploads / step | "
             "downloads / step | device allocations | CUDA graph | goal |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    if not rows:
        return ["No Alloy run succeeded."]
    for r in rows:
        if r["goal"] is None:
            goal = "-"
        elif r["other_host_waits_per_step"] == 0:
            goal = "0: **met**"
        else:
            goal = "0: **not met**"
        graph = ", ".join(sorted({str(g).lower() for g in r["cuda_graph"]}))
        lines.append(f"| {r['run']} | {r['opt_level']} | {r['steps']} | "
                     f"{r['host_waits_per_step']:.4f} | {r['backpressure_waits_per_step']:.4f} | "
                     f"{r['other_host_waits_per_step']:.4f} | {r['uploads_per_step']:.3f} | "
                     f"{r['downloads_per_step']:.4f} | {r['device_allocations']} | {graph} | "
                     f"{goal} |")
    return lines


def run_table(rounds):
    lines = ["| round | run | status | seconds | figure | output |", "|---|---|---|---:|---|---|"]
    for number_ in sorted(rounds):
        for name, run in rounds[number_].items():
            figure = run.get("figure")
            if figure:
                text = f"{figure['images_per_second']:.1f} images/s"
                if "seconds_per_epoch" in figure:
                    text += f", {figure['seconds_per_epoch']:.4f} s/epoch"
                if name.startswith(("lenet-", "ffn-")) and figure.get("test_acc") is not None:
                    text += f", test acc {figure['test_acc']:.4f}"
                if figure.get("amp"):  # lenet_pytorch.py --amp
                    text += f", AMP, final loss scale {figure['loss_scale']:g}"
                if "final_loss" in figure:  # PyTorch's resnet18: a NaN loss voids the figure
                    text += (f", {figure.get('precision')}, final loss "
                             f"{figure['final_loss']:.4g}, loss scale {figure.get('loss_scale'):g}")
                if "skipped_steps" in figure:
                    text += (f", loss scale {figure.get('loss_scale'):g}, skipped steps "
                             f"{figure.get('skipped_steps')}")
                if figure.get("final_grad_norm") is not None:  # PyTorch's, clipped
                    text += f", last grad norm {figure['final_grad_norm']:.4g}"
                if "clipped_steps" in figure:  # Alloy's, clipped
                    norm = figure["grad_norm"]
                    text += (f", clipped steps {figure['clipped_steps']} of {figure['steps']}, "
                             f"mean grad norm {'n/a' if norm is None else f'{norm:.4g}'}")
            else:
                text = run.get("error", "-")
            lines.append(f"| {number_} | {name} | {run['status']} | {run['seconds']} | {text} | "
                         f"`{run['output']}`, `{run['stderr']}` |")
    return lines


def alloy_warnings(out, rounds, limit=8):
    """The first `limit` distinct status, warning and error lines of Alloy's runs (the device
    it chose; a CUDA graph that could not be captured says so here)."""
    seen = []
    for number_ in sorted(rounds):
        for name, run in rounds[number_].items():
            if "alloy" not in name:
                continue
            try:
                with open(os.path.join(out, run["stderr"]), errors="replace") as f:
                    for line in f:
                        line = line.strip()
                        if line.startswith("alloy: ") and line not in seen:
                            seen.append(line)
            except OSError:
                pass
    return seen[:limit]


def clip_cost_section(summary_records):
    table = clip_cost_table(summary_records)
    if not table:
        return []
    return ["## What clipping costs each framework", "",
            "resnet18 mixed precision clipped to norm 1 (resnet-amp-clip) over the same "
            "framework's unclipped run (resnet-amp), images/s: below 1 is the share of speed "
            "clipping takes. PyTorch: the better layout of each, per round. Per round: the "
            "smallest and largest ratio of a single round.", "", *table, ""]


def markdown(out, facts, rounds, records, final):
    summary_records = summaries(records, facts)
    rows = host_wait_rows(rounds)
    rehearsal = facts["mode"] == "cpu"
    lines = ["# Alloy vs PyTorch on one GPU (tools/bench/gpu_vs_pytorch.sh)", ""]
    if rehearsal:
        lines += ["**CPU rehearsal: not a measurement.** It ran the whole pipeline on the CPU with "
                  "tiny random data and step counts, and fp32 in place of PyTorch's AMP; the "
                  "figures below say nothing about speed.", ""]
    if not final:
        lines += [f"*Partial: written after round {max(rounds) if rounds else 0} of "
                  f"{facts['rounds']}; the script has not finished.*", ""]
    notes_path = os.path.join(out, "notes.txt")
    notes = open(notes_path).read().splitlines() if os.path.exists(notes_path) else []
    lines += [
        f"- date (UTC): {facts.get('date')}" + (f" to {facts['end_date']}"
                                               if facts.get("end_date") else ""),
        f"- GPU (nvidia-smi name, driver): {facts.get('nvidia_smi')}",
        f"- PyTorch: torch {facts.get('torch')}, CUDA {facts.get('torch_cuda')}, cuDNN "
        f"{facts.get('cudnn')}, device {facts.get('torch_device_name', 'cpu')}",
        f"- Alloy: `{facts.get('alloy')}`: {facts.get('alloy_version')}",
        f"- commit: {facts.get('commit')}",
        f"- command: `{facts.get('command_line')}`",
        f"- rounds: {len(rounds)} done of {facts['rounds']}; parts: {facts['parts']}; batch "
        f"{facts['batch_size']}; LeNet and ffn {facts['epochs']} epochs per run, resnet18 "
        f"{facts['resnet_epochs']} epochs of {facts['resnet_steps_per_epoch']} steps per Alloy "
        f"run and the same warm-up + timed steps per PyTorch run; the first epoch of every run "
        f"(PyTorch's resnet18: the first epoch's worth of steps) is warm-up, not timed",
        f"- data: {facts.get('data')}",
        "",
        "## Results (medians over the rounds)", "",
        "Speedup: how many times faster Alloy is (baseline seconds / Alloy seconds; Alloy "
        "images/s / baseline images/s). Per round: the smallest and largest speedup of a "
        "single round.", "",
        *results_table(summary_records), "",
        *clip_cost_section(summary_records),
        "## Host round trips of Alloy's training steps", "",
        "Over the timed epochs of every round, from the epoch events' counters (the step loop "
        "only: the epoch's end and the evaluation are outside them). Host waits / step is the "
        "total; of which back-pressure: the batch stager's waits for a pinned buffer whose "
        "previous upload is queued behind the compute of the steps before it (the device is "
        "the bottleneck, the host two batches ahead: not a result read back). The O2 goal, 0 "
        "a step, applies to the other host waits, the waits for a result. The overflow "
        "monitor's poll (every 25th step of a dynamic scale) is one queued download, read once "
        "it has arrived: no host wait.", "",
        *host_table(rows), "",
        "## Runs", "",
        *run_table(rounds), "",
    ]
    warnings = alloy_warnings(out, rounds)
    if warnings or notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [
            f"- Alloy's message: `{w}`" for w in warnings] + [""]
    with open(os.path.join(out, "gpu_bench.md"), "w") as f:
        f.write("\n".join(lines))
    return summary_records, rows


def summarize(args):
    with open(os.path.join(args.out, "facts.json")) as f:
        facts = json.load(f)
    if args.end_date:
        facts["end_date"] = args.end_date
    rounds = load_rounds(args.out, facts)
    records = round_records(rounds, facts)
    summary_records, rows = markdown(args.out, facts, rounds, records, args.final)
    if args.round is not None:
        for record in records:
            if record["round"] == args.round:
                print(json.dumps(record), flush=True)
        return
    for record in summary_records + rows:
        print(json.dumps(record), flush=True)
    cost = clip_cost_table(summary_records)
    print("\n".join(results_table(summary_records) + [""] + (cost + [""] if cost else [])
                    + host_table(rows)), file=sys.stderr)
    unreadable = [f"{run['name']} in round {number_}" for number_, runs in sorted(rounds.items())
                  for run in runs.values() if "error" in run]
    if unreadable:
        sys.exit(f"gpu_bench.py: the output of {', '.join(unreadable)} could not be read "
                 "(see gpu_bench.md)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    data = commands.add_parser("make-data")
    data.add_argument("dir")
    data.add_argument("--train", type=int, required=True)
    data.add_argument("--test", type=int, required=True)
    data.add_argument("--seed", type=int, default=1)
    fact = commands.add_parser("facts")
    fact.add_argument("out")
    fact.add_argument("--mode", choices=("cuda", "cpu"), required=True)
    for key in ("nvidia-smi", "alloy", "alloy-version", "commit", "command-line", "date",
                "data", "parts"):
        fact.add_argument(f"--{key}", default="")
    fact.add_argument("--runs", nargs="+", required=True, help="the names of a round's runs")
    for key in ("rounds", "batch-size", "epochs", "resnet-epochs", "resnet-steps-per-epoch"):
        fact.add_argument(f"--{key}", type=int, required=True)
    summary = commands.add_parser("summarize")
    summary.add_argument("out")
    when = summary.add_mutually_exclusive_group(required=True)
    when.add_argument("--round", type=int)
    when.add_argument("--final", action="store_true")
    summary.add_argument("--end-date", default="")
    args = parser.parse_args()
    if args.command == "make-data":
        make_data(args)
    elif args.command == "facts":
        facts(args)
    else:
        summarize(args)


if __name__ == "__main__":
    main()
