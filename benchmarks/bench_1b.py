"""The 1B-request case on paper: measured per-partition costs times the partitions of 1B requests.

A week of a platform's traffic is about 10⁹ requests in time partitions. This writes a few
partitions with `kvadvisor synth` (one file cut into time-ordered parquet files, one per row
group, as a platform's hourly partitions are), then runs each partition as one task on a
local Dask cluster, once with 1 worker and once with 2, and measures inside each task the CPU
time of every stage:

- read: the partition's canonical columns, batch by batch (``open_trace_stream``);
- hash + scan: its block hashes made dense ids and the exact LRU pass over them
  (``simulate_arrays``: the cache curve), the partition's own accesses only;
- profile: the stage profile of its requests (``profile_workload``, the analysis' defaults);
- replay: the partition through the fleet of ``benchmarks/data/replay_slices_fleet.yaml``
  (a time slice with no warm-up, as ``--time-slice`` replays one; its cost per request grows
  with the load per replica: the synth's 10 requests/s over 24 replicas here).

It prints each stage's CPU-seconds per million requests (the median partition), those times
the partition count of the target (``--target``, 10⁹), the stage that dominates, and the
speed-up of the same tasks from 1 to 2 workers (wall, paired on the same partitions), with
the wall each would give at the target (with the machine's load average, which a shared
machine's wall depends on). Linear in requests by construction: every stage
above is a pass over its partition; the ordered LRU pass over the whole trace's accesses,
which `analyze` runs exactly in one process, costs the same per access but does not spread
over workers (docs/scale.md says so beside the figures).

    python benchmarks/bench_1b.py [--partitions 4] [--partition-requests 50000]
                                  [--target 1e9] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import kvadvisor_argv  # noqa: E402

FLEET = REPO / "benchmarks" / "data" / "replay_slices_fleet.yaml"
STAGES = ("read", "hash + scan", "profile", "replay")


def write_partitions(work: Path, partitions: int, rows: int, seed: int) -> list[Path]:
    """``partitions`` time-ordered parquet files of ``rows`` synthetic requests each."""
    import pyarrow.parquet as pq

    whole = work / "synth.parquet"
    argv = kvadvisor_argv(
        "synth", "-o", str(whole), "--requests", str(partitions * rows), "--seed", str(seed)
    )
    subprocess.run([*argv, "--chunk-rows", str(rows)], check=True, capture_output=True)
    source = pq.ParquetFile(whole)
    out = []
    for i in range(source.num_row_groups):
        path = work / "traces" / f"part={i:05d}" / "part-0.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(source.read_row_group(i), path)
        out.append(path)
    whole.unlink()
    return out


def partition_task(path: str) -> dict[str, float]:
    """One partition's stages, each timed in CPU-seconds of this process."""
    import pyarrow as pa

    from kvadvisor.cache.prefix import simulate_arrays
    from kvadvisor.fleet import ReplayContext, ReplayOptions, TraceArrays, run_replay
    from kvadvisor.pipeline.assemble import prefix_hits
    from kvadvisor.pipeline.options import AnalyzeOptions
    from kvadvisor.plan import load_plan
    from kvadvisor.sections.profile import ProfileInputs, profile_workload
    from kvadvisor.trace.arrays import RequestArrays
    from kvadvisor.trace.model import Trace
    from kvadvisor.trace.stream import open_trace_stream

    cpu: dict[str, float] = {}
    t = time.process_time()
    stream = open_trace_stream(path)
    table = pa.Table.from_batches(list(stream))
    trace = Trace(
        table=table,
        block_tokens=stream.block_tokens,
        source_format=stream.source_format,
        source_path=stream.path,
    )
    cpu["read"] = time.process_time() - t
    t = time.process_time()
    arrays = RequestArrays.of(trace)
    assert arrays.blocks is not None
    curve = simulate_arrays(
        arrays.blocks.offsets,
        arrays.blocks.values.copy(),
        arrays.input_tokens,
        arrays.blocks.block_tokens,
        warmup_requests=0,
        warmup_fraction=0.0,
    )
    cpu["hash + scan"] = time.process_time() - t
    t = time.process_time()
    hits, source = prefix_hits(trace, curve)
    profile_workload(
        ProfileInputs.of(trace, models=()),
        AnalyzeOptions().profile_options(),
        hit_tokens=hits,
        hits_source=source,
    )
    cpu["profile"] = time.process_time() - t
    t = time.process_time()
    plan = load_plan(FLEET)
    replay_arrays = TraceArrays.from_arrays(arrays, curve)
    run_replay(ReplayContext(replay_arrays), plan, ReplayOptions(workers=1))
    cpu["replay"] = time.process_time() - t
    cpu["requests"] = float(trace.requests)
    return cpu


def on_cluster(workers: int, paths: list[Path]) -> tuple[float, list[dict[str, float]]]:
    """Every partition as a task on a local cluster of ``workers``: wall, and each's CPU."""
    from kvadvisor.execute import cluster

    with cluster.local(workers) as ex:
        ex.client.run(partition_task, str(paths[0]))  # compile and import on every worker
        start = time.perf_counter()
        futures = [ex.submit(partition_task, str(p)) for p in paths]
        out = [f.result() for f in futures]
        return time.perf_counter() - start, out


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h"


def main() -> int:
    """Measure, extrapolate, print."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--partition-requests", type=int, default=50_000)
    ap.add_argument("--target", type=float, default=1e9, help="requests on paper")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kvadvisor-bench-1b-"))
    load_before = os.getloadavg()[0]
    try:
        paths = write_partitions(work, args.partitions, args.partition_requests, args.seed)
        wall1, cpu1 = on_cluster(1, paths)
        wall2, cpu2 = on_cluster(2, paths)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    count = args.target / args.partition_requests
    print(
        f"{len(paths)} partitions of {args.partition_requests:,} synthetic requests "
        f"(kvadvisor synth, seed {args.seed}); target {args.target:,.0f} requests = "
        f"{count:,.0f} partitions"
    )
    print(f"{'stage':12} {'CPU-s per 1M requests':>22} {'CPU at the target':>18} {'share':>7}")
    per_m = {s: statistics.median(c[s] / c["requests"] * 1e6 for c in cpu1) for s in STAGES}
    total = sum(per_m.values())
    for s in STAGES:
        at = per_m[s] * args.target / 1e6
        print(f"{s:12} {per_m[s]:>22.2f} {_hours(at):>18} {per_m[s] / total:>7.0%}")
    top = max(per_m, key=per_m.__getitem__)
    print(f"{'all':12} {total:>22.2f} {_hours(total * args.target / 1e6):>18}")
    print(f"dominates: {top} ({per_m[top] / total:.0%} of the CPU)")
    speedup = wall1 / wall2
    work1 = wall1 / len(paths) * count
    busy1 = sum(sum(c[s] for s in STAGES) for c in cpu1)
    busy2 = sum(sum(c[s] for s in STAGES) for c in cpu2)
    print(
        f"wall for the {len(paths)} partitions: 1 worker {wall1:.1f} s, 2 workers {wall2:.1f} s:"
        f" x{speedup:.2f} (the tasks' CPU: {busy1:.1f} s and {busy2:.1f} s; load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores)"
    )
    print(
        f"at the target: 1 worker {_hours(work1)}, 2 workers {_hours(work1 / speedup)} "
        f"(wall, the measured scaling; the exact ordered LRU pass over every access would "
        f"stay on one process)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
