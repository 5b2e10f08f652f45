"""What the pre-parse guards cost: the JSON nesting scan and the CSV open-quote scan.

Both scans read the (decompressed) bytes once more before pyarrow parses them. The nesting
scan runs for every JSONL file pyarrow reads (issue 18: a deeply nested value crashed
pyarrow's recursive parser); it is compiled for files of 32 MiB and more, numpy below. The
quote scan runs for every CSV (an unclosed quote made pyarrow take the rest of the file as
one value, silently). This script builds a canonical CSV and a Bailian JSONL of ``--rows``
requests, then times, median of ``--runs``, the whole read (``read_trace``) and the scan
alone, and prints the scan's share of the read.

    python benchmarks/bench_guards.py --rows 1000000 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from kvadvisor.trace import read_trace
from kvadvisor.trace.readers import _chunks, _ends_inside_quotes, _refuse_deep_json
from kvadvisor.units import BYTES_PER_MIB


def _median_s(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _write_inputs(folder: Path, rows: int) -> tuple[Path, Path, Path]:
    rng = np.random.default_rng(0)
    arrival = np.sort(rng.uniform(0, rows / 10, rows))
    tokens = rng.integers(1, 8192, rows)
    out = rng.integers(1, 512, rows)
    csv_path = folder / "t.csv"
    table = pa.table(
        {
            "request_id": pa.array([f"r{i}" for i in range(rows)]),
            "arrival_s": arrival,
            "input_tokens": tokens,
            "output_tokens": out,
            "model": pa.array(['a, quoted "model"'] * rows),
        }
    )
    pacsv.write_csv(table, csv_path)
    # The same rows without the quoted column: a trace as Azure or BurstGPT publish them.
    plain_path = folder / "plain.csv"
    pacsv.write_csv(
        table.drop_columns(["model"]),
        plain_path,
        pacsv.WriteOptions(quoting_style="none"),
    )
    jsonl_path = folder / "t.jsonl"
    with jsonl_path.open("w", encoding="utf-8") as fh:
        for i in range(rows):
            hashes = ", ".join(str(i * 4 + k) for k in range(4))
            fh.write(
                f'{{"chat_id": {i}, "parent_chat_id": -1, "timestamp": {arrival[i]:.3f}, '
                f'"input_length": {tokens[i]}, "output_length": {out[i]}, "type": "text", '
                f'"turn": 1, "hash_ids": [{hashes}]}}\n'
            )
    return csv_path, plain_path, jsonl_path


def main() -> None:
    """Build the inputs, time read and scan, print one line per format."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        csv_path, plain_path, jsonl_path = _write_inputs(Path(tmp), args.rows)
        cases = [
            (
                "CSV, quoted text in every row",
                csv_path,
                lambda: _ends_inside_quotes(_chunks(csv_path, None)),
            ),
            (
                "CSV, no quotes",
                plain_path,
                lambda: _ends_inside_quotes(_chunks(plain_path, None)),
            ),
            (
                "JSONL (Bailian), nesting scan",
                jsonl_path,
                lambda: _refuse_deep_json(jsonl_path, None),
            ),
        ]
        for label, path, scan in cases:
            read_s = _median_s(lambda p=path: read_trace(p), args.runs)
            scan_s = _median_s(scan, args.runs)
            size = path.stat().st_size / BYTES_PER_MIB
            print(
                f"{label:<32} {size:7.1f} MiB  read_trace {read_s:6.2f} s  scan {scan_s:6.3f} s "
                f"({scan_s / read_s:5.1%} of the read, {size / scan_s:6.0f} MiB/s)"
            )


if __name__ == "__main__":
    main()
