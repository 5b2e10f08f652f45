"""Ingest speed: read_trace on a Mooncake-format JSONL, pyarrow.json against the compiled reader.

Usage: python benchmarks/bench_ingest.py [--requests N | --mooncake-repeats K] [--repeat R]
           [--sizes-mib 8,16,32,64]

The input is either generated (default, ``--requests`` rows) or the Mooncake conversation
trace repeated K times with disjoint ids (``--mooncake-repeats 50``: 601,550 rows, 14.4M hash
ids, 169 MiB, the issue 7 input). The generated file has arrivals every few ms in bursts,
prompt lengths drawn log-normally around the Mooncake conversation trace's median (~7k tokens,
capped at 128k), hash lists of ceil(input_length / 512) ids whose leading ids are shared by
requests of the same conversation (prefix-chained, as in the published trace).

Printed, best of R each:
1. read_trace end to end in this process (numba already started), with the compiled reader
   and with it switched off (pyarrow.json, as before it existed);
2. the JSONL parse alone (``readers._read_jsonl``) in a fresh child process per run: pyarrow,
   the compiled reader in a cold process (numba imported and started by the read, as in
   ``kvadvisor convert``), and with numba already started (as in ``analyze``, whose cache
   passes start it anyway), with each child's peak RSS;
3. the same three at the first ``--sizes-mib`` MiB of the file: where the compiled reader
   starts to pay (readers.FAST_JSONL_MIN_BYTES is chosen from this).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from kvadvisor.trace import read_trace, readers
from kvadvisor.units import BYTES_PER_MIB

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, mooncake_source, write_mooncake_repeated

NEVER = 1 << 62  # a threshold no file reaches: the compiled reader is off

# The child: time readers._read_jsonl on one file; print seconds, its peak RSS before and after
# the read (bytes), rows. "warm" starts numba first by calling a cached kernel, as analyze's
# cache passes would. Peak RSS is the kernel's VmHWM for this process's own memory map: unlike
# ru_maxrss it does not inherit the high-water mark of the parent that spawned it.
CHILD = """
import sys, time
from pathlib import Path
import numpy as np
from kvadvisor.trace import readers
from kvadvisor.trace.detect import TraceFormat

def peak_rss_bytes():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0

path, reader, warm = sys.argv[1], sys.argv[2], sys.argv[3] == "warm"
if warm:
    from kvadvisor.cache import stackdist
    keys = np.arange(4, dtype=np.int64)
    stackdist.remap_dense(keys, np.zeros(16, np.int64), np.empty(4, np.int64))
readers.FAST_JSONL_MIN_BYTES = 0 if reader == "compiled" else 1 << 62
before = peak_rss_bytes()
start = time.perf_counter()
table = readers._read_jsonl(Path(path), None, TraceFormat.MOONCAKE)
seconds = time.perf_counter() - start
print(seconds, before, peak_rss_bytes(), table.num_rows)
"""

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


def _child_read(path: Path, reader: str, warm: bool, repeat: int) -> tuple[float, int, int]:
    """Best seconds of ``repeat`` fresh-process parses; that run's peak RSS before and after."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(path), reader, "warm" if warm else "cold"],
            capture_output=True,
            text=True,
            check=True,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            },
        )
        seconds, before, after, _ = out.stdout.split()
        runs.append((float(seconds), int(before), int(after)))
    return min(runs)


CHILD_RUNS = (
    ("pyarrow.json", "pyarrow", False),
    ("compiled, cold process", "compiled", False),
    ("compiled, numba started", "compiled", True),
)


def _read_trace_best(path: Path, threshold: int, repeat: int) -> tuple[float, int]:
    """Best in-process read_trace seconds with this compiled-reader threshold; rows read."""
    saved = readers.FAST_JSONL_MIN_BYTES
    readers.FAST_JSONL_MIN_BYTES = threshold
    try:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            trace = read_trace(path, "mooncake")
            best = min(best, time.perf_counter() - t0)
        return best, trace.requests
    finally:
        readers.FAST_JSONL_MIN_BYTES = saved


def _prefix(src: Path, dst: Path, size_bytes: int) -> int:
    """The whole lines of ``src`` within its first ``size_bytes`` bytes, written to ``dst``."""
    with src.open("rb") as fh:
        head = fh.read(size_bytes)
    dst.write_bytes(head[: head.rfind(b"\n") + 1])
    return dst.stat().st_size


def main() -> None:
    """Write the input, then time both readers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument(
        "--mooncake-repeats",
        type=int,
        default=0,
        help="use the Mooncake conversation trace repeated K times instead",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--sizes-mib",
        default="8,16,32,64",
        help="file prefixes (MiB) for the crossover table; '' to skip",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        if args.mooncake_repeats:
            path = Path(tmp) / f"mooncake_x{args.mooncake_repeats}.jsonl"
            requests, blocks = write_mooncake_repeated(
                mooncake_source(), path, args.mooncake_repeats
            )
        else:
            path = Path(tmp) / "generated.jsonl"
            requests = args.requests
            blocks = write_trace(path, requests)
        size_mib = path.stat().st_size / BYTES_PER_MIB
        print(
            f"input: {requests:,} requests, {blocks:,} hash ids, {size_mib:,.1f} MiB "
            f"(written in {time.perf_counter() - t0:.1f} s); best of {args.repeat}"
        )

        # Warm-up: numba started and its kernels loaded, the file in the page cache.
        _read_trace_best(path, 0, 1)
        print("\n1. read_trace end to end, in this process")
        results = {}
        for label, threshold in (("compiled reader", 0), ("pyarrow.json", NEVER)):
            best, rows = _read_trace_best(path, threshold, args.repeat)
            assert rows == requests, (rows, requests)
            results[label] = best
            print(
                f"   {label:<24} {best:6.2f} s  {requests / best:>12,.0f} requests/s  "
                f"{size_mib / best:6.0f} MiB/s"
            )
        print(f"   speed-up {results['pyarrow.json'] / results['compiled reader']:.2f}x")

        print("\n2. the JSONL parse alone (readers._read_jsonl), one fresh process per run")
        for label, reader, warm in CHILD_RUNS:
            seconds, before, after = _child_read(path, reader, warm, args.repeat)
            print(
                f"   {label:<24} {seconds:6.2f} s   peak RSS {after / BYTES_PER_MIB:7.1f} MiB "
                f"({before / BYTES_PER_MIB:5.1f} MiB before the read)"
            )

        sizes = [float(s) for s in args.sizes_mib.split(",") if s.strip()]
        if sizes:
            print(
                "\n3. crossover: the same parse on the file's first N MiB "
                f"(threshold now {readers.FAST_JSONL_MIN_BYTES / BYTES_PER_MIB:.0f} MiB)"
            )
            print(f"   {'MiB':>6}  " + "  ".join(f"{label:>24}" for label, _, _ in CHILD_RUNS))
        for mib in sizes:
            part = Path(tmp) / f"head_{mib:g}.jsonl"
            got = _prefix(path, part, int(mib * BYTES_PER_MIB))
            cells = [
                _child_read(part, reader, warm, args.repeat)[0] for _, reader, warm in CHILD_RUNS
            ]
            print(f"   {got / BYTES_PER_MIB:6.1f}  " + "  ".join(f"{c:>22.3f} s" for c in cells))


if __name__ == "__main__":
    main()
