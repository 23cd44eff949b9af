#!/usr/bin/env python3
"""Sums the device time of each kernel in Nsight Compute's CSV (`ncu --csv --metrics
gpu__time_duration.sum`, as tools/gpu/kernel_times.sh runs it) and prints a table, longest
first: calls, total, mean and share of the profiled time, with the time per step when --per
names a kernel that runs once a step (its calls are the steps). With --per, --step also lists
the launches of one whole step in order (from the first launch after the first --per kernel
through the second), each with its time: the table's means cannot tell apart two calls of one
kernel, such as two layers' bias gradients.

    kernel_times.py NCU.csv [--per KERNEL_SUBSTRING [--step]] [--top N]
"""
import argparse
import csv
import sys
from collections import defaultdict

TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6}


def read(path):
    """(kernel name, microseconds) of each profiled launch."""
    with open(path, encoding="utf-8", errors="replace") as text:
        # ncu prints its own lines (==PROF== ...) before the CSV's header.
        lines = [line for line in text if line.startswith('"')]
    launches = []
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "").strip()
        if unit not in TO_US:
            sys.exit(f"kernel_times.py: unknown time unit '{unit}' in {path}")
        value = float(row["Metric Value"].replace(",", ""))
        launches.append((row["Kernel Name"], value * TO_US[unit]))
    return launches


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--per", help="a kernel that runs once per step: report per step")
    parser.add_argument("--step", action="store_true",
                        help="with --per: one step's launches in order")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if args.step and not args.per:
        parser.error("--step needs --per (the kernel that ends a step)")
    launches = read(args.csv)
    if not launches:
        sys.exit(f"kernel_times.py: no gpu__time_duration.sum rows in {args.csv}")
    calls, total = defaultdict(int), defaultdict(float)
    for name, us in launches:
        calls[name] += 1
        total[name] += us
    everything = sum(total.values())
    steps = None
    if args.per:
        steps = sum(count for name, count in calls.items() if args.per in name)
        if steps == 0:
            sys.exit(f"kernel_times.py: no kernel named like '{args.per}' was profiled")
    print(f"{len(launches)} launches of {len(calls)} kernels, {everything:.1f} us of device time"
          + (f"; {steps} steps ('{args.per}'): {everything / steps:.1f} us and "
             f"{len(launches) / steps:.1f} launches a step" if steps else ""))
    header = f"{'calls':>6} {'total us':>10} {'mean us':>9} {'share':>6}"
    if steps:
        header += f" {'us/step':>8}"
    print(header + "  kernel")
    for name in sorted(total, key=total.get, reverse=True)[:args.top]:
        line = (f"{calls[name]:>6} {total[name]:>10.1f} {total[name] / calls[name]:>9.2f} "
                f"{100 * total[name] / everything:>5.1f}%")
        if steps:
            line += f" {total[name] / steps:>8.1f}"
        print(line + "  " + name[:110])
    if args.step:
        print_step(launches, args.per)


def print_step(launches, per):
    """The launches after the first `per` kernel through the next one, in order."""
    ends = [i for i, (name, _) in enumerate(launches) if per in name]
    if len(ends) < 2:
        sys.exit(f"kernel_times.py: --step needs two '{per}' launches in the window, "
                 f"found {len(ends)}")
    step = launches[ends[0] + 1:ends[1] + 1]
    print(f"\none step, {len(step)} launches in order, {sum(us for _, us in step):.1f} us:")
    print(f"{'#':>3} {'us':>8}  kernel")
    for index, (name, us) in enumerate(step, 1):
        print(f"{index:>3} {us:>8.2f}  {name[:110]}")


if __name__ == "__main__":
    main()
