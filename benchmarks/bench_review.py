"""Review speed: replaying plans against a trace (prints seconds per step and requests/s).

Usage: python benchmarks/bench_review.py [--requests N] [--repeat R]

Runs the two example plans against the bundled Mooncake sample trace, then against a synthetic
Mooncake-like trace of N requests built in memory (prompts log-normal around 7k tokens, 512-token
blocks whose leading ids are shared by requests of the same conversation). The replay (exact
prefix-cache pass) runs once per trace; each plan then costs one hit lookup per tier plus
vectorised windowing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvadvisor.pipeline.review import replay_trace
from kvadvisor.plan import load_plan
from kvadvisor.planreview.perf import plan_perf
from kvadvisor.planreview.review import review_plan
from kvadvisor.trace import read_trace
from kvadvisor.trace.schema import build_trace

REPO = Path(__file__).resolve().parents[1]
PLANS = sorted((REPO / "examples" / "plans").glob("*.yaml"))
BLOCK_TOKENS = 512


def synthetic_trace(requests: int, seed: int = 7):
    """A Mooncake-like trace with ``requests`` rows, built without Python per-row loops."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.05, requests))
    inputs = np.clip(rng.lognormal(np.log(7000), 1.0, requests), 1, 128_000).astype(np.int64)
    outputs = np.clip(rng.normal(340, 150, requests), 1, 2000).astype(np.int64)
    blocks = -(-inputs // BLOCK_TOKENS)
    conversations = max(requests // 20, 1)
    conv = rng.integers(0, conversations, requests)
    shared = np.minimum(blocks, rng.integers(0, 8, requests))
    offsets = np.concatenate(([0], np.cumsum(blocks)))
    pos = np.arange(offsets[-1]) - np.repeat(offsets[:-1], blocks)
    req = np.repeat(np.arange(requests), blocks)
    fresh = np.cumsum(pos >= shared[req]) + conversations * 8  # unique ids after the shared run
    values = np.where(pos < shared[req], conv[req] * 8 + pos, fresh)
    hashes = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, pa.int64()))
    table = pa.table(
        {
            "arrival_s": arrival,
            "input_tokens": inputs,
            "output_tokens": outputs,
            "block_hashes": hashes,
        }
    )
    return build_trace(table, path="synthetic", source_format="parquet", block_tokens=BLOCK_TOKENS)


def bench(name: str, trace, plans, repeat: int) -> None:
    """Time the replay once and each plan's review (best of ``repeat``)."""
    t0 = time.perf_counter()
    replay, _ = replay_trace(trace, 0.5)
    replay_s = time.perf_counter() - t0
    perfs = [plan_perf(p) for p in plans]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for plan, perf in zip(plans, perfs, strict=True):
            review_plan(plan, replay, perf)
        best = min(best, time.perf_counter() - t0)
    print(
        f"{name}: {trace.requests:,} requests; replay {replay_s:.2f} s; "
        f"{len(plans)} plans reviewed in {best:.3f} s (best of {repeat}) = "
        f"{trace.requests * len(plans) / best:,.0f} request-plans/s"
    )


def main() -> None:
    """Sample trace, then a synthetic one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    plans = [load_plan(p) for p in PLANS]
    bench(
        "sample (Mooncake conversation)",
        read_trace(REPO / "sample_traces" / "mooncake_conversation.parquet"),
        plans,
        args.repeat,
    )
    t0 = time.perf_counter()
    trace = synthetic_trace(args.requests)
    print(f"built the synthetic trace in {time.perf_counter() - t0:.1f} s")
    bench("synthetic", trace, plans, args.repeat)


if __name__ == "__main__":
    main()
