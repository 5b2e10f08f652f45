"""The streamed scan (totals and the cache curve) in one process and on a local Dask cluster.

Writes ``--partitions`` time partitions of ``--partition-requests`` synthetic requests each
(`kvadvisor synth`, cut as `bench_1b.py` cuts it: one file per partition), then runs the pass
`analyze` streams (:func:`kvadvisor.pipeline.scan.scan`) over the directory: serially, and with
``--workers`` processes reading, summing and preparing the partitions (dense ids for the exact
curve, the spatial filter for SHARDS at ``--rate``) while this process joins them and runs the
one ordered pass. One run of each after a warm-up run (kernels loaded, files in the page
cache); it prints wall, CPU here and CPU on the workers, and checks that the curves are equal.

    python benchmarks/bench_scan_workers.py [--partitions 4] [--partition-requests 250000]
                                            [--workers 2] [--rate 0.05] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_1b import write_partitions  # noqa: E402

from kvadvisor.execute import SERIAL, Executor, open_executor  # noqa: E402
from kvadvisor.pipeline.scan import scan  # noqa: E402
from kvadvisor.trace.stream import open_trace_stream  # noqa: E402


def _cpu_self() -> float:
    """This process's user + system seconds (run on each worker too)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu(ex: Executor) -> tuple[float, float]:
    if not ex.parallel:
        return _cpu_self(), 0.0
    return _cpu_self(), sum(ex.client.run(_cpu_self).values())  # type: ignore[attr-defined]


def timed(root: Path, rate: float | None, ex: Executor) -> tuple[dict, object]:
    """One scan: wall, CPU here and on the workers, and its result."""
    stream = open_trace_stream(root)
    here, there = _cpu(ex)
    t = time.perf_counter()
    result, totals = scan(stream, sample_rate=rate, warmup_fraction=0.5, executor=ex)
    wall = time.perf_counter() - t
    here2, there2 = _cpu(ex)
    return {"wall": wall, "here": here2 - here, "workers": there2 - there}, result


def main() -> int:
    """Write the partitions, scan them both ways, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--partition-requests", type=int, default=250_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-scan-"))
    try:
        files = write_partitions(work, args.partitions, args.partition_requests, args.seed)
        root = files[0].parents[1]
        stream = open_trace_stream(root)
        print(
            f"cores {os.cpu_count()}; load average before {os.getloadavg()}; "
            f"{stream.requests:,} requests, {stream.block_accesses:,} block accesses, "
            f"{len(stream.parts())} partitions"
        )
        with open_executor(args.workers) as cluster:
            for label, rate in (("exact", None), (f"SHARDS {args.rate}", args.rate)):
                rows = {}
                for name, ex in (("1 process", SERIAL), (f"{args.workers} workers", cluster)):
                    timed(root, rate, ex)  # warm-up: kernels loaded, pages cached
                    rows[name] = timed(root, rate, ex)
                (a, ra), (b, rb) = rows.values()
                same = ra.curve.hit_tokens_all.tolist() == rb.curve.hit_tokens_all.tolist()
                for name, (fig, _) in rows.items():
                    print(
                        f"{label}, {name}: wall {fig['wall']:.2f} s; CPU here "
                        f"{fig['here']:.2f} s, on the workers {fig['workers']:.2f} s"
                    )
                print(f"{label}: curves equal: {same}")
        print(f"load average after {os.getloadavg()}")
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
