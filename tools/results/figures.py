#!/usr/bin/env python3
"""Finds figures typed by hand into the README, and history in the docs.

  tools/results/figures.py [--readme README.md] [--history FILE]... [--no-default-history]

The README's measurements live only between `<!-- results:NAME -->` markers, where
tools/results/render.py writes them from their raw records (docs/results/*.jsonl); its
--check says whether those blocks match the records. This script checks the rest: outside the
generated blocks, no line of the README may hold measurement-looking text (a ratio such as
`2.4x`, a time, a rate in images/s or tokens/s, an accuracy or loss such as `0.8380`, a
percentage, a size in MiB with decimals, a FLOP rate). It also checks the README and each
--history file (by default docs/PERFORMANCE.md, docs/architecture.md, docs/command_line.md
and every record in docs/results/) for what belongs to git's history, not to the docs: commit
hashes and dates (the records themselves may hold their own commit and date).
tests/tools/source_hygiene_test.sh checks the whole project for the other kinds of history.

Exit status: 0 when nothing is found; 1, naming each file, line and match, when something is;
2 on a usage error or an unclosed marker.
Needs Python 3.9's standard library only.
"""

import argparse
import glob
import os
import re
import sys

from render import OPEN, ROOT, Problem  # noqa: E402  (the markers render.py fills)

# Text that looks like a measurement. Settings are written so that they do not match (a
# timeout as "ALLOY_COLLECTIVE_TIMEOUT, in seconds", a split as "the last tenth").
MEASUREMENTS = [
    ("ratio", re.compile(r"(?<![\w.])\d+(?:\.\d+)?x(?![\w])")),
    ("rate", re.compile(r"\d[\d,.]*\s*(?:images|img|tokens|samples|steps|examples)\s*"
                        r"(?:/\s*s\b|per\s+(?:CPU\s+)?second)", re.I)),
    ("time", re.compile(r"(?<![\w.-])\d+(?:\.\d+)?\s?(?:ms|us|µs|ns|min|minutes|s|sec|"
                        r"seconds|h|hours)\b")),
    ("accuracy or loss", re.compile(r"(?<![\w.])\d\.\d{4,}(?![\w])")),
    ("percentage", re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?%")),
    ("size", re.compile(r"(?<![\w.])\d+\.\d+\s?(?:KiB|MiB|GiB|KB|MB|GB)\b")),
    ("FLOP rate", re.compile(r"\d[\d,.]*\s?[KMGTP]?FLOP/s")),
]

# Text that is history: it lives in git.
HISTORY = [
    ("commit hash", re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}"
                               r"(?![\w/-]|\.\w)")),
    ("date", re.compile(r"\b20\d\d-\d\d-\d\d\b")),
]


def outside_blocks(text):
    """(line number, line) for each line of text outside the generated blocks (markers
    included, since they hold no figure)."""
    lines = text.split("\n")
    inside = None
    for number, line in enumerate(lines, 1):
        if inside is None:
            match = OPEN.search(line)
            if match:
                inside = match.group(1)
            else:
                yield number, line
        elif f"<!-- /results:{inside} -->" in line:
            inside = None
    if inside is not None:
        raise Problem(f"<!-- results:{inside} --> has no <!-- /results:{inside} -->")


def scan(lines, patterns):
    for number, line in lines:
        for name, pattern in patterns:
            for match in pattern.finditer(line):
                yield number, name, match.group(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    parser.add_argument("--history", action="append", default=[], metavar="FILE",
                        help="a file checked for history only (repeatable)")
    parser.add_argument("--no-default-history", action="store_true",
                        help="check only the --history files given, not the project's docs")
    args = parser.parse_args()
    history = list(args.history)
    if not args.no_default_history:
        history += [os.path.join(ROOT, "docs", name)
                    for name in ("PERFORMANCE.md", "architecture.md", "command_line.md")]
    found = []
    try:
        with open(args.readme, encoding="utf-8") as f:
            readme = f.read()
        lines = list(outside_blocks(readme))
        found += [(args.readme, *hit) for hit in scan(lines, MEASUREMENTS + HISTORY)]
        for path in history:
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8") as f:
                found += [(path, *hit) for hit in scan(enumerate(f.read().split("\n"), 1),
                                                       HISTORY)]
        if not args.no_default_history:
            for path in sorted(glob.glob(os.path.join(ROOT, "docs", "results", "*.jsonl"))):
                with open(path, encoding="utf-8") as f:
                    found += [(path, *hit) for hit in scan(enumerate(f.read().split("\n"), 1),
                                                           HISTORY[-1:])]
    except (OSError, Problem) as error:
        print(f"figures.py: {error}", file=sys.stderr)
        return 2
    for path, number, name, text in found:
        print(f"{os.path.relpath(path)}:{number}: {name} '{text}'", file=sys.stderr)
    if found:
        print(f"figures.py: {len(found)} finding(s): a README figure belongs in a generated "
              "results block (tools/results/render.py, from its record in docs/results/); "
              "history belongs to git", file=sys.stderr)
        return 1
    print(f"figures.py: no figure outside the generated blocks of {args.readme}, no history in "
          f"the docs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
