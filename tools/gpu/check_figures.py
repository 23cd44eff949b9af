#!/usr/bin/env python3
"""The figures tools/gpu/check.sh reads from what it ran, printed as key=value lines (one
figure a line, values without newlines), and its markdown table. Standard library only: the
GPU machine and CI have python3, neither is sure to have jq.

  check_figures.py train LOG.jsonl     an `alloy train --log-json` log
  check_figures.py mem MEM.jsonl       an `alloy mem --json` file
  check_figures.py ctest OUTPUT GPUS   the output of `ctest -V`, on a machine with GPUS GPUs
  check_figures.py driver SAMPLES      `nvidia-smi --query-gpu=memory.used,memory.total` samples
  check_figures.py table CHECKS.tsv    the checks (phase, check, figure, goal, result) as a table
  check_figures.py port                a free TCP port on 127.0.0.1
"""
import json
import re
import socket
import statistics
import sys


def emit(figures):
    for key, value in figures.items():
        print(f"{key}={value}")


def read_json_lines(path):
    """The objects of a JSON-lines file; a line that does not parse (a log cut short by a kill)
    is left out."""
    objects = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                objects.append(json.loads(line))
            except ValueError:
                pass
    return objects


def scale_text(scale):
    """A loss scale as a number, with its power of two when it is one from 2^10: 32768 (2^15)."""
    if float(scale).is_integer():
        scale = int(scale)
        exponent = scale.bit_length() - 1
        return f"{scale} (2^{exponent})" if scale >= 1024 and scale == 1 << exponent else str(scale)
    return f"{scale:g}"


def train(path):
    events = read_json_lines(path)

    def last(kind):
        found = [e for e in events if e.get("event") == kind]
        return found[-1] if found else {}

    start, end = last("start"), last("end")
    epochs = [e for e in events if e.get("event") == "epoch"]
    figures = {"ended": int(bool(end))}
    if end:
        figures.update(
            test_acc=end.get("test_acc", ""),
            test_acc_ema=end.get("test_acc_ema", ""),
            digest=end.get("params_digest", ""),
            digests=",".join(end.get("params_digests", [])),
            world_size=end.get("world_size", start.get("world_size", "")),
        )
    figures.update(device=start.get("device", ""), dist_backend=start.get("dist_backend", ""))
    if epochs:
        final = epochs[-1]
        # Every epoch has the same number of steps (the last batch may be smaller); a resumed
        # run's log counts its steps from the checkpoint's, so count the log's own epochs.
        steps = len(epochs) * -(-start["train_examples"] // start["batch_size"])
        figures.update(
            loss_scale=final["loss_scale"],
            skipped=final["skipped_steps"],
            epoch_seconds=statistics.mean(e["epoch_seconds"] for e in epochs),
            images_per_second=statistics.median(e["images_per_second"] for e in epochs),
            host_waits_per_step=sum(e.get("host_waits", 0) for e in epochs) / max(steps, 1),
            # Of those, back-pressure: the batch stager waiting on a device that is behind.
            backpressure_waits_per_step=sum(e.get("backpressure_waits", 0) for e in epochs)
            / max(steps, 1),
        )
        parts = [f"acc {end['test_acc']:.4f}" if "test_acc" in end else "no end event",
                 f"scale {scale_text(final['loss_scale'])}",
                 f"skipped {final['skipped_steps']}",
                 f"{figures['epoch_seconds']:.2f} s/epoch (mean of {len(epochs)})",
                 f"{figures['images_per_second']:.0f} img/s (median)",
                 f"{figures['host_waits_per_step']:.3f} host waits/step "
                 f"({figures['backpressure_waits_per_step']:.3f} back-pressure)"]
        figures["summary"] = "; ".join(parts)
        figures["loss_scale_text"] = scale_text(final["loss_scale"])
    emit(figures)


def mem(path):
    levels = {o["opt_level"]: o for o in read_json_lines(path) if "opt_level" in o}
    figures = {"levels": ",".join(levels)}
    for name, level in levels.items():
        figures[f"peak_{name}"] = level["peak_bytes"]
        figures[f"peak_mib_{name}"] = f"{level['peak_bytes'] / 2**20:.2f}"
        figures[f"activations_{name}"] = level["activations_bytes"]
        figures[f"activations_mib_{name}"] = f"{level['activations_bytes'] / 2**20:.2f}"
        figures[f"images_per_second_{name}"] = f"{level['images_per_second']:.1f}"
        if "driver_used_bytes" in level:  # alloy's own device view (CUDA)
            figures[f"reserved_mib_{name}"] = f"{level['device_reserved_bytes'] / 2**20:.0f}"
            figures[f"driver_mib_{name}"] = f"{level['driver_used_bytes'] / 2**20:.0f}"
        if "max_batch" in level:  # --max-batch; ">=" where the search's limit was reached
            figures[f"max_batch_{name}"] = level["max_batch"]
            figures[f"max_batch_text_{name}"] = (
                f">= {level['max_batch']}" if level["max_batch_reached_limit"]
                else f"{level['max_batch']} ({level['max_batch_failing']} fails)")
    if levels and all("max_batch" in level for level in levels.values()):
        figures["max_batches"] = ", ".join(
            f"{name} {figures[f'max_batch_text_{name}']}" for name in levels)
        figures["smallest_max_batch"] = min(level["max_batch"] for level in levels.values())
        if "O0" in levels:
            figures["half_below_o0"] = ",".join(
                name for name in levels
                if name != "O0" and levels[name]["max_batch"] < levels["O0"]["max_batch"])
    if "O0" in levels:
        base = levels["O0"]["peak_bytes"]
        figures["ratios"] = ", ".join(
            f"{name} {levels[name]['peak_bytes'] / base:.2f}x" for name in levels if name != "O0")
        figures["worst_ratio"] = max(
            (levels[name]["peak_bytes"] / base for name in levels if name != "O0"), default="")
    emit(figures)


def ctest(path, gpus):
    """Each test's status from the `N/M Test #I: name ...status  T sec` lines, and the reason
    of each skip from the test's own `I: SKIPPED: reason` line. A skip is allowed on a GPU
    machine only when the test says it needs more devices than the machine has. A test marked
    DISABLED ("Not Run (Disabled)") is neither failed nor skipped: check.sh decides."""
    status_line = re.compile(r"^\s*\d+/\d+ Test\s+#(\d+): (\S+) \.*\s*(.*?)\s+[\d.]+ sec")
    reason_line = re.compile(r"^(\d+): SKIPPED: (.*)")
    tests, reasons = {}, {}
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if match := status_line.match(line):
                tests[match[1]] = (match[2], match[3].lstrip("*"))
            elif match := reason_line.match(line):
                reasons[match[1]] = match[2].strip()
    passed = [name for name, status in tests.values() if status == "Passed"]
    disabled = [name for name, status in tests.values() if status == "Not Run (Disabled)"]
    failed = [f"{name} ({status})" for name, status in tests.values()
              if status not in ("Passed", "Skipped", "Not Run (Disabled)")]
    allowed, other = [], []
    for number, (name, status) in tests.items():
        if status != "Skipped":
            continue
        reason = reasons.get(number, "no reason printed")
        fewer = re.search(r"this machine has (\d+) CUDA device", reason)
        (allowed if fewer and int(fewer[1]) == gpus else other).append(f"{name}: {reason}")
    emit({"total": len(tests), "passed": len(passed), "failed": len(failed),
          "failed_names": few(failed), "failed_detail": " ;; ".join(failed),
          "skipped": len(allowed) + len(other),
          "skipped_allowed": len(allowed), "allowed_detail": " ;; ".join(allowed),
          "skipped_other": len(other), "other_names": few([o.split(":")[0] for o in other]),
          "other_detail": " ;; ".join(other), "disabled": len(disabled),
          "disabled_names": few(disabled), "disabled_detail": ", ".join(disabled)})


def few(names):
    """The first four names and how many more, for a table cell."""
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def driver(path):
    """Largest memory.used of the samples (MiB) and the first sample's, taken before the run."""
    samples = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            fields = [f.strip() for f in line.split(",")]
            if len(fields) == 2 and all(f.isdigit() for f in fields):
                samples.append((int(fields[0]), int(fields[1])))
    if samples:
        emit({"samples": len(samples), "before_mib": samples[0][0],
              "peak_mib": max(used for used, _ in samples), "total_mib": samples[0][1]})
    else:
        emit({"samples": 0})


def table(path):
    header = ["phase", "check", "figure", "goal", "result"]
    rows = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            cells = line.rstrip("\n").split("\t")
            rows.append([cell.replace("|", "/") for cell in cells])
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths]] + rows:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")


def port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    if command == "ctest":
        ctest(arguments[0], int(arguments[1]))
    else:
        {"train": train, "mem": mem, "driver": driver, "table": table, "port": port}[command](
            *arguments)
