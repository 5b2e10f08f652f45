"""Ingest speed: read_trace on a generated 1M-request Mooncake-format JSONL (prints requests/s).

Usage: python benchmarks/bench_ingest.py [--requests N] [--repeat R]

The file is written to a temporary folder: arrivals every few ms in bursts, prompt lengths
drawn log-normally around the Mooncake conversation trace's median (~7k tokens, capped at
128k), hash lists of ceil(input_length / 512) ids whose leading ids are shared by requests of
the same conversation (prefix-chained, as in the published trace).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.json as pajson

from kvadvisor.trace import read_trace
from kvadvisor.trace.detect import TraceFormat
from kvadvisor.trace.readers import JSONL_BLOCK_BYTES, JSONL_SCHEMAS

BLOCK_TOKENS = 512


def write_trace(path: Path, requests: int, seed: int = 7) -> int:
    """Write a Mooncake-format JSONL with ``requests`` rows; returns Σ len(hash_ids)."""
    rng = np.random.default_rng(seed)
    timestamps = np.cumsum(rng.exponential(3.0, requests)).astype(np.int64)  # ms
    inputs = np.minimum(rng.lognormal(np.log(7000), 1.0, requests), 128_000).astype(np.int64)
    inputs = np.maximum(inputs, 1)
    outputs = np.clip(rng.normal(340, 150, requests), 1, 2000).astype(np.int64)
    blocks = -(-inputs // BLOCK_TOKENS)
    # A request shares its first `shared` blocks with an earlier one of the same conversation.
    conversations = 20_000
    conv = rng.integers(0, conversations, requests)
    conv_base = np.arange(conversations, dtype=np.int64) * 1_000
    next_id = conversations * 1_000
    total = 0
    with open(path, "w", encoding="ascii") as fh:
        step = 50_000
        for lo in range(0, requests, step):
            hi = min(lo + step, requests)
            lines = []
            for i in range(lo, hi):
                n = int(blocks[i])
                shared = min(n, int(rng.integers(0, 8)))
                base = int(conv_base[conv[i]])
                ids = list(range(base, base + shared)) + list(range(next_id, next_id + n - shared))
                next_id += n - shared
                total += n
                lines.append(
                    f'{{"timestamp": {timestamps[i]}, "input_length": {inputs[i]}, '
                    f'"output_length": {outputs[i]}, "hash_ids": [{", ".join(map(str, ids))}]}}'
                )
            fh.write("\n".join(lines) + "\n")
    return total


def main() -> None:
    """Generate, then time read_trace."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mooncake_1m.jsonl"
        t0 = time.perf_counter()
        blocks = write_trace(path, args.requests)
        size_mb = path.stat().st_size / 1e6
        print(
            f"generated {args.requests:,} requests, {blocks:,} hash ids, {size_mb:,.0f} MB "
            f"in {time.perf_counter() - t0:.1f} s"
        )
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            trace = read_trace(path)
            best = min(best, time.perf_counter() - t0)
            assert trace.requests == args.requests
            offsets, _ = trace.hash_arrays()
            assert int(offsets[-1]) == blocks
        parse = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            pajson.read_json(
                str(path),
                read_options=pajson.ReadOptions(block_size=JSONL_BLOCK_BYTES),
                parse_options=pajson.ParseOptions(
                    explicit_schema=JSONL_SCHEMAS[TraceFormat.MOONCAKE],
                    unexpected_field_behavior="infer",
                ),
            )
            parse = min(parse, time.perf_counter() - t0)
        print(
            f"read_trace: best of {args.repeat}: {best:.2f} s = "
            f"{args.requests / best:,.0f} requests/s ({size_mb / best:,.0f} MB/s)"
        )
        print(
            f"  of which pyarrow.json parsing alone: {parse:.2f} s; mapping, validation and "
            f"sorting: {best - parse:.2f} s"
        )


if __name__ == "__main__":
    main()
