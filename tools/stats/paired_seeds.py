#!/usr/bin/env python3
"""Paired comparison of training settings over seeds.

Runs `alloy train` once per (setting, seed) with the common arguments, the setting's own and
--seed, and appends one JSON line per run to the record (--record): seed, setting, its
arguments, test_acc and params_digest from the run's end event, and what
tools/results/stamp.py adds: machine (and GPU), date, commit, command and load. A
(setting, seed) the record already holds is not run again, so an interrupted series resumes;
with --no-run nothing runs and only the record is read. Then, for each setting other than the
baseline, over the seeds both have: the paired differences (setting - baseline) of test_acc,
their mean, sample standard deviation and 95% t-interval (Student's t with n - 1 degrees of
freedom), as a table, and as one JSON line each ({"event": "paired", ...}) on standard output.

  tools/stats/paired_seeds.py --alloy build/bin/alloy --seeds 1-5 \\
      --common "train --model lenet --batch-size 256 --lr 0.2 --epochs 10 --device cpu --threads 2" \\
      --setting O0="--opt-level O0" --setting O3="--opt-level O3" \\
      --setting O3+SR="--opt-level O3 --stochastic-rounding" \\
      --baseline O0 --record docs/results/o3_seeds_cpu.jsonl

Exit status: 0; 2 for bad arguments; 1 when a run fails, the record is unreadable or a setting
shares fewer than two seeds with the baseline.
"""

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "results"))
import stamp  # noqa: E402  (machine, date, commit, load: what every raw record names)

# Two-sided 95% quantiles of Student's t (the 0.975 quantile) by degrees of freedom; between
# listed values the next smaller df's (larger, so conservative); past 120 the normal's.
T_975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
    17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064,
    25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000,
    120: 1.980,
}


def t_quantile_975(df):
    if df < 1:
        raise ValueError("t quantile needs at least one degree of freedom")
    if df > 120:
        return 1.960
    return T_975[max(k for k in T_975 if k <= df)]


def paired_summary(differences):
    """Mean, sample standard deviation and 95% t-interval of the differences (n >= 2)."""
    n = len(differences)
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci95": [mean - half, mean + half],
            "t975": t_quantile_975(n - 1)}


def fail(message, status=1):
    print(f"paired_seeds.py: {message}", file=sys.stderr)
    sys.exit(status)


def parse_seeds(text):
    seeds = []
    for part in text.split(","):
        try:
            if "-" in part:
                low, high = (int(p) for p in part.split("-", 1))
                seeds.extend(range(low, high + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            fail(f"--seeds '{text}' is not a list like 1-5 or 1,3,7", 2)
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        fail(f"--seeds '{text}' must name distinct non-negative seeds", 2)
    return seeds


def parse_setting(text):
    name, sep, args = text.partition("=")
    if not sep or not name:
        fail(f"--setting '{text}' is not NAME=ARGS", 2)
    return name, shlex.split(args)


def read_record(path):
    runs = []
    if not os.path.exists(path):
        return runs
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                run = json.loads(line)
                float(run["test_acc"]), int(run["seed"]), str(run["setting"])
            except (ValueError, KeyError, TypeError) as error:
                fail(f"{path}:{number}: not a run record ({error})")
            runs.append(run)
    return runs


def end_event(log_path):
    """The run's last end event and its start event, from its --log-json file."""
    start = end = None
    with open(log_path, encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            if event.get("event") == "start":
                start = event
            elif event.get("event") == "end":
                end = event
    return start, end


def run_one(alloy, common, name, args, seed):
    with tempfile.TemporaryDirectory() as work:
        log = os.path.join(work, "log.jsonl")
        command = [alloy] + common + args + ["--seed", str(seed), "--log-json", log]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            fail(f"{name} seed {seed} exited {result.returncode}: {result.stderr.strip()}")
        start, end = end_event(log)
    if end is None or "test_acc" not in end:
        fail(f"{name} seed {seed}: its log has no end event with test_acc")
    return {
        "seed": seed, "setting": name, "args": args, "test_acc": end["test_acc"],
        "params_digest": end.get("params_digest", ""),
        "opt_level": (start or {}).get("opt_level"),
        **stamp.fields(" ".join(shlex.quote(c) for c in [os.path.basename(alloy)] + common + args
                                + ["--seed", str(seed)])),
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--record", required=True, help="JSON lines of the runs (appended)")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=ARGS",
                        help="a setting: its name and its own alloy arguments (repeatable)")
    parser.add_argument("--baseline", required=True, help="the setting the others are paired with")
    parser.add_argument("--seeds", default="1-5", help="seeds, e.g. 1-5 or 1,2,9 (default 1-5)")
    parser.add_argument("--alloy", default="build/bin/alloy", help="the alloy command")
    parser.add_argument("--common", default="", help="arguments every run gets, 'train ...'")
    parser.add_argument("--no-run", action="store_true", help="only read the record")
    parser.add_argument("--metric", default="test_acc", help=argparse.SUPPRESS)
    o = parser.parse_args()

    seeds = parse_seeds(o.seeds)
    settings = dict(parse_setting(s) for s in o.setting)
    runs = read_record(o.record)
    if not o.no_run:
        if not settings:
            fail("give at least one --setting to run (or --no-run to read the record)", 2)
        if o.baseline not in settings:
            fail(f"--baseline '{o.baseline}' is not one of the --setting names", 2)
        if not os.access(o.alloy, os.X_OK):
            fail(f"{o.alloy} is not an executable (build it: tools/setup.sh)")
        common = shlex.split(o.common)
        done = {(r["setting"], int(r["seed"])) for r in runs}
        os.makedirs(os.path.dirname(os.path.abspath(o.record)), exist_ok=True)
        for seed in seeds:
            for name, args in settings.items():
                if (name, seed) in done:
                    continue
                run = run_one(o.alloy, common, name, args, seed)
                with open(o.record, "a", encoding="utf-8") as f:
                    f.write(json.dumps(run) + "\n")
                runs.append(run)
                print(f"{name} seed {seed}: test_acc {run['test_acc']:.4f}", file=sys.stderr)

    # The record's runs of the chosen seeds; a (setting, seed) recorded twice keeps the last.
    by_setting = {}
    for r in runs:
        if int(r["seed"]) in seeds:
            by_setting.setdefault(r["setting"], {})[int(r["seed"])] = float(r[o.metric])
    if o.baseline not in by_setting:
        fail(f"the record {o.record} holds no run of the baseline '{o.baseline}'")
    names = [n for n in (settings or by_setting) if n != o.baseline and n in by_setting]
    if not names:
        fail(f"the record {o.record} holds no setting besides the baseline '{o.baseline}'")
    base = by_setting[o.baseline]
    print(f"{o.metric}: setting - {o.baseline}, paired by seed; mean, sample sd, 95% t-interval")
    summaries = []
    for name in names:
        common_seeds = sorted(set(base) & set(by_setting[name]))
        if len(common_seeds) < 2:
            fail(f"'{name}' and '{o.baseline}' share {len(common_seeds)} seed(s); a paired "
                 "interval needs at least 2")
        differences = [by_setting[name][s] - base[s] for s in common_seeds]
        summary = paired_summary(differences)
        summary.update({"event": "paired", "metric": o.metric, "setting": name,
                        "baseline": o.baseline, "seeds": common_seeds,
                        "differences": differences,
                        "setting_mean": sum(by_setting[name][s] for s in common_seeds) /
                        len(common_seeds),
                        "baseline_mean": sum(base[s] for s in common_seeds) / len(common_seeds)})
        summaries.append(summary)
        low, high = summary["ci95"]
        print(f"  {name:>12} - {o.baseline}: n {summary['n']}  mean {summary['mean']:+.4f}  "
              f"sd {summary['sd']:.4f}  95% [{low:+.4f}, {high:+.4f}]  "
              f"(differences {', '.join(f'{d:+.4f}' for d in differences)})")
    for summary in summaries:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
