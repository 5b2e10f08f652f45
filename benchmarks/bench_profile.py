"""Benchmark: the whole stage profile of a 1M-request trace (target: under 2 s on 2 cores).

Times ``kvadvisor.sections.profile.profile_workload`` end to end on an in-memory trace: stage
times with the latency/concurrency fixed point, GPU-time and latency split, I/O demand windows
and chunk I/Os, in-flight series, memory fit and load-vs-recompute. Reading the file is not
included (that is the trace reader's benchmark).

    python benchmarks/bench_profile.py [--requests 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pyarrow as pa

from kvadvisor.sections.profile import ProfileOptions, profile_workload
from kvadvisor.trace.schema import build_trace

TARGET_S = 2.0


def synthetic_trace(requests: int, seed: int = 0):
    """A synthetic trace with engine-reported prefix hits.

    Poisson arrivals at 30 req/s; log-normal prompts (median ~2k) and outputs (median ~200);
    a uniform share of each prompt's leading 16-token blocks reported as cached.
    """
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / 30.0, requests))
    inp = np.clip(rng.lognormal(7.6, 1.0, requests), 16, 128_000).astype(np.int64)
    out = np.clip(rng.lognormal(5.3, 1.0, requests), 1, 8_000).astype(np.int64)
    cached = (inp * rng.uniform(0, 1, requests)).astype(np.int64) // 16 * 16
    table = pa.table(
        {"arrival_s": arrival, "input_tokens": inp, "output_tokens": out, "cached_tokens": cached}
    )
    return build_trace(table, path="synthetic", source_format="synthetic", block_tokens=16)


def main() -> None:
    """Build the trace once, profile it ``--repeat`` times, print every time and the best."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    trace = synthetic_trace(args.requests)
    hits = trace.column_np("cached_tokens").astype(np.float64)
    options = ProfileOptions(model="llama-3.1-70b", gpu="h200")
    profile_workload(trace, options)  # warm-up: loads the catalogs (cached afterwards)
    times, cpu = [], []
    for _ in range(args.repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        profile = profile_workload(trace, options, hit_tokens=hits, hits_source="cached_tokens")
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    split = profile.stage_split
    print(f"requests            {args.requests:,} over {trace.duration_s:,.0f} s")
    cpus, load = len(os.sched_getaffinity(0)), os.getloadavg()[0]
    print(f"cpus available      {cpus}  (load avg {load:.1f})")
    print(f"profile wall s      {', '.join(f'{t:.3f}' for t in times)}")
    # On a shared machine wall time includes waiting for a core; CPU time does not.
    print(f"profile cpu s       {', '.join(f'{t:.3f}' for t in cpu)}")
    verdict = "met" if min(times) < TARGET_S else "NOT met"
    print(f"best wall s         {min(times):.3f}  (target < {TARGET_S:.1f} s: {verdict})")
    if os.getloadavg()[0] > len(os.sched_getaffinity(0)):
        print(
            f"best cpu s          {min(cpu):.3f}  (machine oversubscribed: wall time includes "
            "waiting for a core; single-threaded numpy, so idle wall time ~ cpu time)"
        )
    print(
        f"prefill share       {split.prefill_share:.3f} GPU time, "
        f"{split.latency_prefill_share:.3f} latency ({split.classification})"
    )
    print(
        f"write mean/peak     {profile.io.write.mean_bytes_per_s / 1e9:.2f} / "
        f"{profile.io.write.peak_bytes_per_s / 1e9:.2f} GB/s"
    )


if __name__ == "__main__":
    main()
