#!/usr/bin/env python3
"""Renders the benchmark records in docs/results/*.jsonl into README.md's results tables.

  tools/results/render.py [--readme README.md] [--results docs/results] [--check]

Every `<!-- results:NAME -->` ... `<!-- /results:NAME -->` pair in the README is replaced by the
table of docs/results/NAME.jsonl (the records tools/bench/gpu_vs_pytorch.sh --results-dir appends:
one "row" line per row and round, one "comparison" line per comparison): the latest run in the file
(its date, commit and command), each row's median over its rounds and range (and its share of the
dense fp16 peak, where the records give one), and each comparison's ratio of medians, per-round
range and goal. The file is written only when its text changes, so a second run leaves it as it is.
--check writes nothing and exits 1, naming the tables, when a table in the README differs from what
the records give (2: a usage error, an unclosed marker or an unreadable record).

Needs Python 3.9's standard library only.
"""

import argparse
import json
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"


def share(rounds):
    """The median share of the peak over a row's rounds, as a table cell."""
    shares = [r["share_of_peak"] for r in rounds if r.get("share_of_peak") is not None]
    return f"{100 * statistics.median(shares):.1f}% | " if shares else "- | "


def span(low, high):
    """A range of figures, in the precision of number()."""
    return f"{low:,.0f}-{high:,.0f}" if high >= 100 else f"{low:.3g}-{high:.3g}"


def cell(text):
    return str(text).replace("|", "\\|")


def table(path, base):
    """The markdown between a pair of markers, from its records file (named relative to base,
    the README's folder)."""
    relative = os.path.relpath(path, base)
    if not os.path.exists(path):
        return [f"*No records yet in `{relative}`.*"]
    records = read_records(path)
    if not records:
        return [f"*No records yet in `{relative}`.*"]
    latest = max((r.get("date") or "", r.get("commit") or "", r.get("command") or "")
                 for r in records)
    run = [r for r in records
           if (r.get("date") or "", r.get("commit") or "", r.get("command") or "") == latest]
    first = run[0]
    lines = [f"Latest run: {first.get('date')} UTC, commit {first.get('commit')}, "
             f"{first.get('gpu') or first.get('device')} (driver {first.get('driver')}), torch "
             f"{first.get('torch')}, CUDA {first.get('torch_cuda')}, cuDNN {first.get('cudnn')}; "
             f"`{first.get('command')}`. Records: `{relative}`.", ""]
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
