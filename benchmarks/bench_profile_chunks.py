"""The chunked stage profile's memory per chunk row: the planner's CHUNK_BYTES_PER_ROW.

Profiles a canonical parquet trace (e.g. the one `bench_stream.py --keep` leaves) in chunks of
each size given, in its own child process, and prints the peak RSS over the peak after reading
one batch, per row of a chunk (its own rows and 2 x --context rows). Two sizes give the per-row
slope and the fixed part (the profiler's time grids), as docs/benchmarks.md 4 records them.

    python benchmarks/bench_profile_chunks.py TRACE.parquet [--rows 262144 1048576]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

MODEL = "deepseek-v3"  # as bench_stream.py analyses the synth trace


def _child(path: str, rows: int, context: int) -> None:
    import numpy as np

    from kvadvisor.pipeline.profilechunks import profile_chunks_of
    from kvadvisor.pipeline.streaming import PROFILE_COLUMNS
    from kvadvisor.sections.chunkprofile import profile_chunks
    from kvadvisor.sections.profile import ProfileOptions
    from kvadvisor.trace.stream import open_trace_stream

    stream = open_trace_stream(path)
    next(iter(stream.select(("arrival_s",))))  # a batch in flight, as in the pipeline
    hits = np.zeros(stream.requests)  # the exact pass's per-request hits, held in the pipeline
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    chunks = profile_chunks_of(stream.select(PROFILE_COLUMNS), rows, context, (), hits)
    profile_chunks(
        chunks,
        ProfileOptions(model=MODEL),
        models=(),
        mean_context_tokens=float(stream.requests and 3000),
        hits_source="zeros",
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"chunks of {rows:,} rows (+2 x {context:,}): {(peak - base) / 2**20:,.0f} MiB over "
        f"{base / 2**20:,.0f} MiB, {(peak - base) / (rows + 2 * context):,.0f} B per chunk row, "
        f"{time.perf_counter() - start:.1f} s"
    )


def main() -> int:
    """One child per chunk size; then the slope and the fixed part from the first and last."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--rows", type=int, nargs="+", default=[262_144, 1_048_576])
    parser.add_argument("--context", type=int, default=32_768)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(str(args.trace), args.rows[0], args.context)
        return 0
    for rows in args.rows:
        out = subprocess.run(
            [sys.executable, __file__, str(args.trace), "--rows", str(rows), "--child",
             "--context", str(args.context)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        print(out.stdout.strip() or out.stderr.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
