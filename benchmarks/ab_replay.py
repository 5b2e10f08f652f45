"""Paired A/B replay speed: bench_replay's Mooncake section from two checkouts, interleaved.

Usage: python benchmarks/ab_replay.py BEFORE_CHECKOUT AFTER_CHECKOUT [--pairs N] [--runs N]

Each pair runs ``benchmarks/bench_replay.py --skip million sample`` once from each checkout
(in its own process, the checkout first on ``PYTHONPATH``; the order alternates between pairs
so drift in the machine's load falls on both), reads the median wall time it prints, and
reports per checkout the median and range of those medians, and the median of the per-pair
ratios after / before. On a shared machine the paired ratio is the figure to trust.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

MEDIAN = re.compile(r"median (\d+\.\d+) s")


def one(checkout: Path, runs: int) -> float:
    """bench_replay's Mooncake median from ``checkout``, in seconds."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    script = checkout / "benchmarks" / "bench_replay.py"
    cmd = [sys.executable, str(script), "--runs", str(runs), "--skip", "million", "sample"]
    done = subprocess.run(cmd, env=env, cwd=checkout, capture_output=True, text=True, check=True)
    found = MEDIAN.search(done.stdout)
    if found is None:
        raise SystemExit(f"no median in the output of {script}: {done.stdout[-300:]}")
    return float(found.group(1))


def main() -> None:
    """Run the pairs and print the medians, ranges and the paired ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(args.pairs):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for side in order:
            times[side].append(one(getattr(args, side), args.runs))
        print(f"pair {i + 1}: before {times['before'][-1]:.3f} s, after {times['after'][-1]:.3f} s")
    for side, got in times.items():
        print(
            f"{side}: median {statistics.median(got):.3f} s (range {min(got):.3f}-{max(got):.3f})"
        )
    ratios = [a / b for a, b in zip(times["after"], times["before"], strict=True)]
    print(
        f"after / before, paired: median {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}) over {args.pairs} pairs"
    )


if __name__ == "__main__":
    main()
