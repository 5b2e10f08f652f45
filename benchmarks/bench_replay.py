"""Replay speed: the Mooncake trace on 8 replicas with three tiers, 1M synthetic requests, a sample.

Usage: python benchmarks/bench_replay.py [--runs N] [--requests N] [--sample-requests N]

1. The bundled Mooncake conversation trace (12,031 requests, 4.1M output tokens): Qwen3-32B at
   TP 2 on H200, 2 instances x 4 replicas, tiers: host DRAM per replica, local NVMe per
   instance, a shared pool (three tiers below the GPU; the pool joins the 8 replicas into one
   group). Median wall time of ``--runs`` replays after one warm-up (numba compiled and cached).
2. ``--requests`` synthetic requests (`kvadvisor synth`'s default shape, seed 0, built in
   memory): Qwen3-32B on 16 H200 replicas (2 instances of 8), host DRAM per replica and NVMe per
   instance; wall time and the process's peak resident memory.
3. A stated sample against the full run on ``--sample-requests`` synthetic requests: 2 of 16
   replicas (one instance) with the traffic round robin sends them, against all 16; the
   relative error of each headline figure.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import pyarrow as pa

from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.models import get_model
from kvadvisor.fleet import ReplayContext, ReplayResult, TraceArrays, summarize
from kvadvisor.fleet.build import kv_model, pool_tokens, roofline_for

# The fleet's resolved inputs, built by hand (outside the fleet only tests and benchmarks may):
# the benchmark sweeps replicas, TP and pooling directly, without a plan file per point.
from kvadvisor.fleet.engine import run_resolved
from kvadvisor.fleet.resolved import (
    ResolvedFleet,
    ResolvedScheduler,
    ResolvedStage,
    ResolvedTier,
    RouterPolicy,
    Scope,
)
from kvadvisor.fleet.sample import sample_replicas
from kvadvisor.synth import SynthShape, generate
from kvadvisor.trace import read_trace
from kvadvisor.trace.schema import build_trace
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_KIB, BYTES_PER_MIB
from kvadvisor.vocab import Stage, Topology

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "sample_traces" / "mooncake_conversation.parquet"


def replay(trace: ReplayContext | TraceArrays, fleet: ResolvedFleet) -> ReplayResult:
    """The resolved fleet replayed and summarised (kvadvisor.fleet.replay, without a plan)."""
    return summarize(run_resolved(trace, fleet))


def deployment(replicas_per_instance: int, instances: int, tp: int, pooled: bool) -> ResolvedFleet:
    """Qwen3-32B on H200 with DRAM per replica, NVMe per instance and optionally a pool."""
    model = get_model("qwen3-32b")
    pm, step = roofline_for(model, get_gpu("h200"), tp)
    kv = kv_model(model, "bf16", tp)

    def tier(
        name: str, kind: str, scope: Scope, cap_gb: float, rd: float, wr: float
    ) -> ResolvedTier:
        return ResolvedTier(
            name,
            kind,
            scope,
            cap_gb * BYTES_PER_GB / kv.bytes_per_token,
            rd * BYTES_PER_GB,
            wr * BYTES_PER_GB,
            latency_s=80e-6 if kind != "dram" else 10e-6,
        )

    tiers = [
        tier("host-dram", "dram", Scope.REPLICA, 200, 50, 50),
        tier("local-nvme", "ssd", Scope.INSTANCE, 20_000, 56, 28),
    ]
    if pooled:
        tiers.append(tier("pool", "pool", Scope.POOLED, 100_000, 25, 25))
    stage = ResolvedStage(
        role=Stage.SERVING,
        instances=instances,
        replicas_per_instance=replicas_per_instance,
        gpus_per_replica=tp,
        step=step,
        pool_tokens=pool_tokens(pm),
        scheduler=ResolvedScheduler(8192, 1024, 16),
        router=RouterPolicy.ROUND_ROBIN,
        tiers=tuple(tiers),
        kv=kv,
    )
    return ResolvedFleet("bench", Topology.AGGREGATED, (stage,), kv)


def synthetic(requests: int) -> TraceArrays:
    """`kvadvisor synth`'s default shape (seed 0), built in memory."""
    batches = list(generate(SynthShape(requests=requests, seed=0)))
    table = pa.Table.from_batches(batches)
    trace = build_trace(table, path="synth", source_format="synth", block_tokens=512)
    return TraceArrays.from_trace(trace)


def peak_mib() -> float:
    """This process's peak resident set so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * BYTES_PER_KIB / BYTES_PER_MIB


def mooncake(runs: int) -> None:
    """Section 1: the Mooncake conversation trace, 8 replicas, three tiers."""
    arrays = TraceArrays.from_trace(read_trace(MOONCAKE))
    dep = deployment(4, 2, 2, pooled=True)
    summarize(run_resolved(ReplayContext(arrays), dep))  # warm-up: compile or load the kernel
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        res = replay(ReplayContext(arrays), dep)  # fresh context: the LRU passes included
        times.append(time.perf_counter() - start)
    print(
        f"mooncake conversation: {arrays.requests:,} requests, "
        f"{int(arrays.output_tokens.sum()):,} output tokens, 8 replicas, 3 tiers: "
        f"median {statistics.median(times):.2f} s over {runs} runs "
        f"(min {min(times):.2f}, max {max(times):.2f}); {res.counts.steps:,} steps, "
        f"prefill share {res.stage_split.prefill_share:.3f}, overloaded "
        f"{res.overload.overloaded}"
    )


def million(requests: int) -> None:
    """Section 2: ``requests`` synthetic requests on 16 replicas."""
    start = time.perf_counter()
    arrays = synthetic(requests)
    built = time.perf_counter() - start
    dep = deployment(8, 2, 1, pooled=False)
    start = time.perf_counter()
    res = replay(arrays, dep)
    wall = time.perf_counter() - start
    print(
        f"synthetic {requests:,} requests ({int(arrays.output_tokens.sum()):,} output tokens, "
        f"built in {built:.1f} s): replay {wall:.1f} s on 16 replicas; {res.counts.steps:,} "
        f"steps; peak RSS {peak_mib():,.0f} MiB; overloaded {res.overload.overloaded}; "
        f"TTFT p50 {res.requests.ttft_s.p50 if res.requests.ttft_s else 0:.3f} s"
    )


def sampled(requests: int) -> None:
    """Section 3: a 2-of-16-replica sample against the full run."""
    arrays = synthetic(requests)
    dep = deployment(2, 8, 1, pooled=False)
    full = replay(arrays, dep)
    sub_arrays, sub_dep, scale = sample_replicas(arrays, dep, 2)
    start = time.perf_counter()
    part = replay(sub_arrays, sub_dep)
    wall = time.perf_counter() - start

    def err(a: float, b: float) -> str:
        return f"{(b - a) / a:+.2%}" if a else "n/a"

    assert full.requests.ttft_s and part.requests.ttft_s and full.requests.tpot_s
    assert part.requests.tpot_s
    rows = [
        ("TTFT p50", full.requests.ttft_s.p50, part.requests.ttft_s.p50),
        ("TTFT p99", full.requests.ttft_s.p99, part.requests.ttft_s.p99),
        ("TPOT p50", full.requests.tpot_s.p50, part.requests.tpot_s.p50),
        ("TPOT p99", full.requests.tpot_s.p99, part.requests.tpot_s.p99),
        ("prefill GPU-s", full.stage_split.prefill_gpu_s, part.stage_split.prefill_gpu_s * scale),
        ("decode GPU-s", full.stage_split.decode_gpu_s, part.stage_split.decode_gpu_s * scale),
        (
            "NVMe write mean per device",
            full.tiers[1].write_bytes_per_s.mean,
            part.tiers[1].write_bytes_per_s.mean,
        ),
    ]
    print(
        f"sample: 2 of 16 replicas on {requests:,} synthetic requests "
        f"({sub_arrays.requests:,} replayed, {wall:.1f} s) against the full run:"
    )
    for name, a, b in rows:
        print(f"  {name:<28} full {a:12.4g}  sample {b:12.4g}  error {err(a, b)}")


def main() -> None:
    """Run the three sections and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--sample-requests", type=int, default=200_000)
    parser.add_argument("--skip", nargs="*", default=(), choices=("mooncake", "million", "sample"))
    args = parser.parse_args()
    if "mooncake" not in args.skip:
        mooncake(args.runs)
    if "sample" not in args.skip:
        sampled(args.sample_requests)
    if "million" not in args.skip:
        million(args.requests)


if __name__ == "__main__":
    main()
