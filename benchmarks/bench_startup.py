"""Start-up time of the command line: `--version`, `--help`, and `info` on a small trace.

Usage: python benchmarks/bench_startup.py [--runs N]

Each command runs N times as its own process (`python -m kvadvisor ...`, this checkout first on
the path) after one unmeasured run; the median wall time is printed beside the targets of
issue 19 (--version and --help <= 0.3 s, info on a small file <= 1 s), and the interpreter's
own start (`python -c pass`) as the floor. The median CPU time (user + system) is printed
beside it: on a shared machine a run waits for a core, which the wall time counts and the CPU
time does not. The last line is the libraries `info` cannot avoid (typer with its pydantic
adapters, rich, numpy, pyarrow, and pandas, which pyarrow imports on its first array).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _harness import REPO, kvadvisor_argv, run_measured

SMALL_TRACE = REPO / "sample_traces" / "vllm_bench_old.json"
CASES = (
    ("python -c pass (floor)", [sys.executable, "-c", "pass"], None),
    ("kvadvisor --version", kvadvisor_argv("--version"), 0.3),
    ("kvadvisor --help", kvadvisor_argv("--help"), 0.3),
    ("kvadvisor info (30 requests)", kvadvisor_argv("info", str(SMALL_TRACE)), 1.0),
    (
        "libraries info imports",
        [sys.executable, "-c", "import typer._adapters, rich, numpy, pyarrow.compute, pandas"],
        None,
    ),
)


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    for label, argv, target in CASES:
        run_measured(label, argv)  # warm the OS file cache and numba's on-disk cache
        runs = [run_measured(label, argv) for _ in range(args.runs)]
        if any(r.returncode for r in runs):
            sys.exit(f"{label} failed:\n{runs[0].stderr_tail}")
        walls = sorted(r.wall_s for r in runs)
        cpu = statistics.median(r.cpu_s for r in runs)
        goal = f"target <= {target:.1f} s" if target else ""
        print(
            f"{label:<30} median {statistics.median(walls):6.3f} s   "
            f"min {walls[0]:6.3f} s   max {walls[-1]:6.3f} s   cpu {cpu:6.3f} s   {goal}"
        )


if __name__ == "__main__":
    main()
