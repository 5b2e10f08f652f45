"""Whole `kvadvisor analyze` against its floor, end to end, side by side in one run.

The floor reads the same canonical parquet with pyarrow, flattens the block hashes and runs the
bare stack-distance kernel (benchmarks/_floor_child.py): the least any exact curve can cost.
Both run as child processes (interpreter start and imports included); the fastest of ``--runs``
counts, after one warm-up run each that fills numba's on-disk cache. Target (issue 7):
analyze ≤ 3× the floor.

    python benchmarks/bench_floor.py [--repeats 50] [--workdir DIR] [--runs 3]

Input: the Mooncake conversation trace repeated ``--repeats`` times with disjoint hashes,
converted once with `kvadvisor convert`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import (
    best_of,
    kvadvisor_argv,
    mooncake_source,
    run_measured,
    write_mooncake_repeated,
)

from kvadvisor.units import BYTES_PER_MIB

TARGET_RATIO = 3.0


def main() -> int:
    """Build the input, measure the floor and analyze, print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kvadvisor-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    jsonl = work / f"mooncake_x{args.repeats}.jsonl"
    parquet = work / f"mooncake_x{args.repeats}.parquet"
    if not parquet.exists():
        requests, accesses = write_mooncake_repeated(mooncake_source(), jsonl, args.repeats)
        conv = run_measured("convert", kvadvisor_argv("convert", str(jsonl), "-o", str(parquet)))
        if conv.returncode:
            sys.exit(conv.stderr_tail)
    print(f"input: {parquet.name} ({parquet.stat().st_size / BYTES_PER_MIB:.1f} MiB)")
    floor_argv = [
        sys.executable,
        str(Path(__file__).resolve().parent / "_floor_child.py"),
        str(parquet),
    ]
    out = work / "floor-analyze.json"
    variants = {
        "analyze (defaults)": kvadvisor_argv(
            "analyze", str(parquet), "--format", "json", "-o", str(out)
        ),
        "analyze --cache-instances 1": kvadvisor_argv(
            "analyze", str(parquet), "--format", "json", "-o", str(out), "--cache-instances", "1"
        ),
    }
    best_of("warm-up floor", floor_argv, 1)
    for argv in variants.values():
        best_of("warm-up analyze", argv, 1)
    floor = best_of("floor (read+flatten+kernel)", floor_argv, args.runs)
    print(floor.line())
    for label, argv in variants.items():
        m = best_of(label, argv, args.runs)
        ratio = m.wall_s / floor.wall_s
        print(m.line())
        print(
            f"  {label} / floor: {ratio:.2f}x   target <= {TARGET_RATIO:g}x "
            f"{'MET' if ratio <= TARGET_RATIO else 'NOT MET'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
