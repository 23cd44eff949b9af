#!/usr/bin/env python3
"""Adds to each benchmark record what makes it a raw record: where and when it was measured.

  ... | tools/results/stamp.py --command "CMD" [--data-file PATH]... >>docs/results/NAME.jsonl

Reads JSON objects, one a line, on standard input and writes them to standard output with these
keys added (a key a record already has is left as it is):

  machine    the CPU's model name, the architecture and the core count
  gpu        the first GPU's name and `driver` its driver version, where `nvidia-smi` answers
  date       UTC, "YYYY-MM-DDTHH:MM:SSZ", the same for every line of one call
  commit     `git describe --always` of this tree, -dirty when a tracked file other than a
             record under docs/results differs from it
  command    the command that measured the records (--command)
  load       /proc/loadavg when the records were written: the machine may be shared, and a
             loaded machine's figures say less
  data_files for each --data-file, its base name, size in bytes and sha256: never its path, which
             names a folder of the machine the records were taken on

Used by the scripts under tools/bench/ (from Python: `import stamp; stamp.fields(...)`).
Needs Python 3.9's standard library only.
"""

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{os.uname().machine}, {model or 'unknown CPU'}, {os.cpu_count()} cores"


def gpu():
    """The first GPU's name and driver version, or (None, None) where there is none."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True).stdout
        name, driver = (part.strip() for part in out.splitlines()[0].split(",", 1))
        return name, driver
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return None, None


def commit():
    """The tree's commit, with -dirty when a tracked file other than a record differs from it:
    the records a run appends to do not change what was measured."""
    try:
        def git(*args):
            return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                                  check=True).stdout.strip()
        name = git("describe", "--always")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                      ":(exclude)docs/results")
        return name + ("-dirty" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load():
    try:
        with open("/proc/loadavg", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def data_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"name": os.path.basename(path), "bytes": os.path.getsize(path),
            "sha256": digest.hexdigest()}


def fields(command, data_files=()):
    """The keys stamp adds, computed once for a batch of records."""
    out = {"machine": machine()}
    name, driver = gpu()
    if name:
        out.update(gpu=name, driver=driver)
    out.update(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               commit=commit(), command=command, load=load())
    if data_files:
        out["data_files"] = [data_file(p) for p in data_files]
    return out


def redact(text, data_files):
    """text with each data file's path replaced by its base name."""
    for path in data_files:
        text = text.replace(path, os.path.basename(path))
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--command", required=True, help="the command that measured the records")
    parser.add_argument("--data-file", action="append", default=[], metavar="PATH",
                        help="a data file the measurement read (repeatable)")
    args = parser.parse_args()
    extra = fields(redact(args.command, args.data_file), args.data_file)
    for number, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            print(f"stamp.py: line {number}: not JSON ({error})", file=sys.stderr)
            return 1
        for key, value in extra.items():
            record.setdefault(key, value)
        for key in ("command",):
            record[key] = redact(record[key], args.data_file)
        print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
