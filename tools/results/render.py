#!/usr/bin/env python3
"""Renders the raw records in docs/results/*.jsonl into README.md's results tables.

  tools/results/render.py [--readme README.md] [--results docs/results] [--check]

Every `<!-- results:NAME -->` ... `<!-- /results:NAME -->` pair in the README is replaced by the
table of docs/results/NAME.jsonl, headed by where, when and how its figures were measured (the
machine or GPU and driver, the date, the commit, the command, the load) and a link to the file.
Only records that name their machine (or GPU), date and commit are shown. The kind of table
follows the records:

  "row" / "comparison"  tools/bench/gpu_vs_pytorch.sh: the latest run, each row's median over
                        its rounds and range (and share of the fp16 peak), each comparison's
                        ratio of medians, per-round range and goal
  "round" / "summary"   the CPU benchmarks against PyTorch (tools/bench/*_vs_pytorch.sh): the
                        latest summary, its medians, ratio of medians and per-round range
  "run" with val_loss   tools/bench/shakespeare_cpu.sh: the latest run of each level and seed
  "mem"                 tools/bench/mem_cpu.sh: the latest `alloy mem --json` run, peak MiB per
                        category and opt level
  setting and test_acc  tools/stats/paired_seeds.py: the latest run of each setting and seed,
                        each setting's mean and its paired difference from the baseline (mean,
                        sd, 95% t-interval)

The file is written only when its text changes, so a second run leaves it as it is. --check
writes nothing and exits 1, naming the tables, when a table in the README differs from what the
records give (2: a usage error, an unclosed marker or an unreadable record).

Needs Python 3.9's standard library only.
"""

import argparse
import json
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "stats"))
from paired_seeds import paired_summary  # noqa: E402  (the same statistics as the runs print)

OPEN = re.compile(r"<!-- results:([\w.-]+) -->")


class Problem(Exception):
    pass


def read_records(path):
    records = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as error:
                    raise Problem(f"{path}:{number}: not JSON ({error})") from None
    return records


def number(value, unit):
    if value is None:
        return "n/a"
    return (f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}").rstrip()


def share(rounds):
    """The median share of the peak over a row's rounds, as a table cell."""
    shares = [r["share_of_peak"] for r in rounds if r.get("share_of_peak") is not None]
    return f"{100 * statistics.median(shares):.1f}% | " if shares else "- | "


def span(low, high):
    """A range of figures, in the precision of number()."""
    return f"{low:,.0f}-{high:,.0f}" if high >= 100 else f"{low:.3g}-{high:.3g}"


def cell(text):
    return str(text).replace("|", "\\|")


def when(date):
    """A record's date as the tables show it: "YYYY-MM-DDTHH:MM:SSZ" -> "YYYY-MM-DD HH:MM"."""
    return str(date).replace("T", " ").rstrip("Z")[:16]


def complete(record):
    """Whether a record says where, when and at which commit it was measured."""
    return bool(record.get("date") and record.get("commit")
                and (record.get("machine") or record.get("gpu") or record.get("device")))


def header(run, link, latest=True):
    """The line above a table: where, when and how its records were measured, and their file."""
    dates = sorted({when(r["date"]) for r in run})
    commits = list(dict.fromkeys(str(r["commit"]) for r in sorted(run, key=lambda r: r["date"])))
    first = run[-1]
    where = first.get("gpu") or first.get("machine") or first.get("device")
    parts = [f"{dates[-1]} UTC" if latest or len(dates) == 1
             else f"{dates[0]} to {dates[-1]} UTC",
             ("commit " if len(commits) == 1 else "commits ") + ", ".join(commits), where]
    if first.get("driver"):
        parts[-1] += f" (driver {first['driver']})"
    if first.get("gpu") and first.get("machine"):
        parts.append(first["machine"])
    for key, name in (("torch", "torch"), ("torch_cuda", "CUDA"), ("cudnn", "cuDNN")):
        if first.get(key) is not None:
            parts.append(f"{name} {first[key]}")
    loads = sorted({str(r["load"]).split()[0] for r in run if r.get("load")})
    if loads:
        parts.append("load average " + (loads[0] if len(loads) == 1
                                         else f"{loads[0]}-{loads[-1]}"))
    command = commands_text([r["command"] for r in run if r.get("command")])
    return [("Latest run: " if latest else "Runs: ") + ", ".join(parts) + f"; {command}. "
            f"Record: {link}.", ""]


def shown(command):
    """A recorded command as a user would type it: the program's name without its folder (and
    without a version suffix of alloy's), and no --log-json file."""
    words = command.split()
    if words and "/" in words[0]:
        words[0] = os.path.basename(words[0])
    if words and words[0].startswith("alloy-"):
        words[0] = "alloy"
    out = []
    for word in words:
        if out and out[-1] == "--log-json":
            out.pop()
            continue
        out.append(word)
    return out


def commands_text(commands):
    """One command, or the words every run's command shares and the flags that vary."""
    runs = list(dict.fromkeys(tuple(shown(c)) for c in commands))
    if not runs:
        return "command not recorded"
    if len(runs) == 1:
        return f"`{' '.join(runs[0])}`"
    common = 0
    while all(len(r) > common and r[common] == runs[0][common] for r in runs):
        common += 1
    while common and runs[0][common - 1].startswith("--"):  # a flag whose value varies
        common -= 1
    varying = list(dict.fromkeys(w for r in runs for w in r[common:] if w.startswith("--")))
    return (f"`{' '.join(runs[0][:common])}` with each run's " + ", ".join(
        f"`{w}`" for w in varying) + f" ({len(runs)} runs)")


def latest_run(records):
    """The records of the latest run: those with the latest (date, commit, command)."""
    def key(r):
        return (r.get("date") or "", r.get("commit") or "", r.get("command") or "")
    newest = max(key(r) for r in records)
    return [r for r in records if key(r) == newest]


def gpu_table(records, link):
    """tools/bench/gpu_vs_pytorch.sh's rows and comparisons."""
    run = latest_run(records)
    lines = header(run, link)
    rows = {}
    for r in run:
        if r.get("record") == "row":
            rows.setdefault(r["row"], []).append(r)
    peak = any(r.get("share_of_peak") is not None for r in run)
    if rows:
        lines += ["| row | settings | median | range | rounds ok | "
                  + ("share of fp16 peak | " if peak else "") + "status |",
                  "|---|---|---:|---|---:|" + ("---:|" if peak else "") + "---|"]
        for name_, rounds in rows.items():
            values = [r["value"] for r in rounds if r.get("status") == "ok"
                      and r.get("value") is not None]
            unit = next((r["unit"] for r in rounds if r.get("unit")), "")
            statuses = sorted({r.get("status") for r in rounds})
            reasons = sorted({r["reason"] for r in rounds if r.get("reason")
                              and r.get("status") != "ok"})
            lines.append(
                f"| {cell(name_)} | {cell(rounds[0].get('label'))} | "
                f"{number(statistics.median(values) if values else None, unit)} | "
                + (span(min(values), max(values)) if values else "n/a")
                + f" | {len(values)} of {len(rounds)} | "
                + (share(rounds) if peak else "")
                + cell(", ".join(statuses) + "".join(f"; {x}" for x in reasons[:1])) + " |")
    comparisons = [r for r in run if r.get("record") == "comparison"]
    if comparisons:
        lines += ["", "| Alloy | against | ratio of medians | per-round ratios | goal | met |",
                  "|---|---|---:|---|---|---|"]
        for c in comparisons:
            ratio = c.get("ratio_of_medians")
            lines.append(
                f"| {cell(c['subject'])} | {cell(c.get('baseline_label'))} | "
                + ("n/a" if ratio is None else f"**{ratio:.2f}x**") + " | "
                + ("n/a" if ratio is None else f"{c['round_ratio_min']:.2f}x-"
                   f"{c['round_ratio_max']:.2f}x ({c['rounds']} rounds)") + " | "
                + ("-" if c.get("goal") is None else f">= {c['goal']:g}x") + " | "
                + ("-" if c.get("met") is None else ("yes" if c["met"] else "no")) + " |")
    return lines


NAMES = {"pytorch": "PyTorch", "torchvision": "torchvision"}
LABELS = ("variant", "batch_size", "recompute")  # what tells a run's summaries apart
RATE = re.compile(r"^(alloy|pytorch|torchvision)_(\w+?)_per_(second|cpu_second)_median$")


def rounds_table(records, link):
    """A CPU benchmark against PyTorch: the summaries of its latest run, one row per figure
    (and per variant, batch size or recompute setting where the run measured several)."""
    summaries = [r for r in records if r.get("record") == "summary"]
    if not summaries:
        raise Problem(f"{link}: round records without a summary")
    run = latest_run(summaries)
    baseline = next((m.group(1) for s in run for m in map(RATE.match, s)
                     if m and m.group(1) != "alloy"), "pytorch")
    name = NAMES.get(baseline, baseline)
    lines = header(run, link)
    lines += [f"| figure | {name} (median) | Alloy (median) | Alloy / {name} | per-round ratios "
              "| rounds |", "|---|---:|---:|---:|---|---:|"]
    for summary in run:
        setting = ", ".join(f"{key.split('_')[0]} {summary[key]}" for key in LABELS
                            if summary.get(key) not in (None, "none", "base"))
        rates = {}
        for key, value in summary.items():
            match = RATE.match(key)
            if match and value is not None:
                rates.setdefault((match.group(2), match.group(3)), {})[match.group(1)] = value
        for (unit, per), values in sorted(rates.items(), key=lambda i: i[0][1] != "second"):
            cpu = per == "cpu_second"
            prefix = "cpu_" if cpu else ""
            ratio = summary.get(f"{prefix}ratio_of_medians")
            low = summary.get(f"{prefix}round_ratio_min")
            high = summary.get(f"{prefix}round_ratio_max")
            count = summary.get("cpu_rounds" if cpu else "rounds")
            lines.append(
                f"| {unit} per {'CPU second' if cpu else 'second'}"
                + (f", {cell(setting)}" if setting else "") + " | "
                f"{number(values.get(baseline), '')} | {number(values.get('alloy'), '')} | "
                + ("n/a" if ratio is None else f"**{ratio:.2f}x**") + " | "
                + ("n/a" if low is None else f"{low:.2f}x-{high:.2f}x") + f" | {count} |")
    return lines


def runs_table(records, link):
    """tools/bench/shakespeare_cpu.sh: validation loss by level and seed."""
    latest = {}
    for r in sorted(records, key=lambda r: r["date"]):
        latest[(r["level"], r["seed"])] = r
    levels = list(dict.fromkeys(level for level, _ in latest))
    seeds = sorted({seed for _, seed in latest})
    lines = header(list(latest.values()), link, latest=False)
    lines += ["| level | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | vs "
              + levels[0] + " |", "|---|" + "---:|" * (len(seeds) + 2)]
    first = None
    for level in levels:
        losses = [latest[(level, s)]["val_loss"] for s in seeds if (level, s) in latest]
        mean = statistics.mean(losses)
        first = mean if first is None else first
        lines.append(f"| {level} | " + " | ".join(
            f"{latest[(level, s)]['val_loss']:.4f}" if (level, s) in latest else "-"
            for s in seeds) + f" | **{mean:.4f}** | "
            + ("" if level == levels[0] else f"{mean - first:+.4f}") + " |")
    return lines


def seeds_table(records, link):
    """tools/stats/paired_seeds.py: each setting against the baseline, paired by seed."""
    latest = {}
    for r in sorted(records, key=lambda r: r["date"]):
        latest.setdefault(r["setting"], {})[int(r["seed"])] = r
    settings = list(latest)
    baseline = "O0" if "O0" in latest else settings[0]
    base = latest[baseline]
    lines = header([r for runs in latest.values() for r in runs.values()], link, latest=False)
    lines += [f"| setting | seeds | mean test accuracy | minus {baseline}: mean | sd | "
              "95% t-interval |", "|---|---|---:|---:|---:|---|"]
    for setting in settings:
        runs = latest[setting]
        mean = statistics.mean(r["test_acc"] for r in runs.values())
        seeds = sorted(runs)
        row = f"| {cell(setting)} | {seeds[0]}-{seeds[-1]} ({len(seeds)}) | {mean:.4f} | "
        paired = sorted(set(runs) & set(base))
        if setting == baseline or len(paired) < 2:
            lines.append(row + "| | |")
            continue
        s = paired_summary([runs[k]["test_acc"] - base[k]["test_acc"] for k in paired])
        lines.append(row + f"**{s['mean']:+.4f}** ({s['n']} seeds) | {s['sd']:.4f} | "
                     f"[{s['ci95'][0]:+.4f}, {s['ci95'][1]:+.4f}] |")
    return lines


CATEGORIES = ("parameters", "master_parameters", "gradients", "optimizer_state", "activations",
              "workspace", "data", "peak")


def mem_table(records, link):
    """tools/bench/mem_cpu.sh: `alloy mem --json`, peak MiB per category and opt level."""
    run = latest_run(records)
    levels = [r["opt_level"] for r in run]
    first = run[0]
    lines = header(run, link)
    lines += ["| peak MiB | " + " | ".join(levels) + " |", "|---|" + "---:|" * len(levels)]
    for category in CATEGORIES:
        cells = []
        for r in run:
            value = r[f"{category}_bytes"] / 2**20
            base = first[f"{category}_bytes"] / 2**20
            ratio = f" ({value / base:.2f}x)" if r is not first and base else ""
            cells.append(f"{value:.2f}{ratio}")
        name = "**peak_bytes**" if category == "peak" else category
        if category == "peak":
            cells = [f"**{c}**" for c in cells]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    speed = [r["images_per_second"] for r in run]
    lines.append("| images/s | " + " | ".join(
        f"{v:.0f}" + ("" if i == 0 else f" ({v / speed[0]:.2f}x)") for i, v in enumerate(speed))
        + " |")
    return lines


def kind(records):
    r = records[0]
    if r.get("record") in ("row", "comparison"):
        return gpu_table
    if r.get("record") in ("round", "summary"):
        return rounds_table
    if r.get("record") == "run" and "val_loss" in r:
        return runs_table
    if r.get("record") == "mem":
        return mem_table
    if "setting" in r and "test_acc" in r:
        return seeds_table
    raise Problem("records of an unknown kind")


def table(path, base):
    """The markdown between a pair of markers, from its records file (linked relative to base,
    the README's folder)."""
    relative = os.path.relpath(path, base)
    link = f"[`{relative}`]({relative})"
    if not os.path.exists(path):
        return [f"*No records yet in `{relative}`.*"]
    records = read_records(path)
    if not records:
        return [f"*No records yet in `{relative}`.*"]
    usable = [r for r in records if complete(r)]
    if not usable:
        return [f"*No record in {link} names its machine, date and commit: no figure shown.*"]
    try:
        return kind(usable)(usable, link)
    except (KeyError, TypeError, ValueError, StopIteration) as error:
        raise Problem(f"{path}: {error!r}") from None


def render(text, results, base):
    """The README's text with every marked table rendered, and the names of the tables."""
    out, names, at = [], [], 0
    for match in OPEN.finditer(text):
        if match.start() < at:
            continue
        name = match.group(1)
        close = f"<!-- /results:{name} -->"
        end = text.find(close, match.end())
        if end < 0:
            raise Problem(f"<!-- results:{name} --> has no {close}")
        path = os.path.join(results, f"{name}.jsonl")
        out += [text[at:match.end()], "\n", "\n".join(table(path, base)), "\n"]
        names.append(name)
        at = end
    out.append(text[at:])
    return "".join(out), names


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    parser.add_argument("--results", default=os.path.join(ROOT, "docs", "results"))
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a table differs from its records")
    args = parser.parse_args()
    try:
        with open(args.readme) as f:
            text = f.read()
        rendered, names = render(text, args.results,
                                os.path.dirname(os.path.abspath(args.readme)))
    except (OSError, Problem) as error:
        print(f"render.py: {error}", file=sys.stderr)
        return 2
    if rendered == text:
        print(f"render.py: {len(names)} table(s) in {args.readme} match their records")
        return 0
    if args.check:
        differing = [n for n in names if section(text, n) != section(rendered, n)]
        print(f"render.py: {args.readme}: the table(s) {', '.join(differing)} differ from "
              f"their records: run tools/results/render.py", file=sys.stderr)
        return 1
    with open(args.readme, "w") as f:
        f.write(rendered)
    print(f"render.py: {args.readme}: {len(names)} table(s) rendered")
    return 0


def section(text, name):
    start = text.find(f"<!-- results:{name} -->")
    return text[start:text.find(f"<!-- /results:{name} -->", start)]


if __name__ == "__main__":
    sys.exit(main())
