"""Write a Trace: canonical parquet (lossless), canonical CSV, or Mooncake JSONL.

Parquet keeps everything (block_tokens, the source format and the notes in its metadata).
CSV keeps every column (block hashes as space-separated ids) but no metadata: it is read back
with ``--block-tokens``. Mooncake JSONL keeps what the format has (timestamp in ms,
input_length, output_length, hash_ids of 512-token blocks); :func:`not_carried` names the
rest. Each file reads back into the same rows (tests/test_convert_formats.py).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from kvadvisor.errors import ConfigError
from kvadvisor.io.fileio import output_stream
from kvadvisor.trace.model import (
    META_ARRIVALS_MEASURED,
    META_BLOCK_TOKENS,
    META_DROPPED,
    META_NOTES,
    META_SOURCE_FORMAT,
    Trace,
)

ROW_GROUP_ROWS = 128 * 1024


def canonical_metadata(
    source_format: str,
    block_tokens: int | None,
    *,
    notes: Sequence[str] = (),
    dropped: Mapping[str, int] | None = None,
    arrivals_measured: bool = True,
) -> dict[bytes, bytes]:
    """The parquet schema metadata every canonical file carries (readers look these keys up)."""
    meta = {
        META_SOURCE_FORMAT: source_format.encode(),
        META_NOTES: json.dumps(list(notes)).encode(),
        META_DROPPED: json.dumps(dict(dropped or {}), sort_keys=True).encode(),
        META_ARRIVALS_MEASURED: b"true" if arrivals_measured else b"false",
    }
    if block_tokens is not None:
        meta[META_BLOCK_TOKENS] = str(block_tokens).encode()
    return meta


MOONCAKE_COLUMNS = ("arrival_s", "input_tokens", "output_tokens", "block_hashes")
# What each format is, for `convert --to` and the extension that names it.
FORMATS = {"parquet": ".parquet", "csv": ".csv", "mooncake": ".jsonl"}
JSONL_ROWS = 64 * 1024  # rows turned into Python objects at a time


def format_for(path: str | Path) -> str | None:
    """The format an output's extension names (None when it names none)."""
    suffix = Path(path).suffix.lower()
    return next((name for name, ext in FORMATS.items() if ext == suffix), None)


def not_carried(trace: Trace, fmt: str) -> tuple[str, ...]:
    """The trace's columns with values that ``fmt`` has no place for (none for parquet, CSV)."""
    if fmt != "mooncake":
        return ()
    table = trace.table
    return tuple(
        c
        for c in table.column_names
        if c not in MOONCAKE_COLUMNS and table.column(c).null_count < table.num_rows
    )


def _refuse_own_input(trace: Trace, path: Path) -> None:
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give an output file name")
    if path.exists() and path.resolve() == Path(trace.source_path).resolve():
        raise ConfigError(f"{path}: refusing to overwrite the input trace; choose another -o")


def write_csv(trace: Trace, path: str | Path) -> None:
    """Canonical CSV, written atomically: every column, block hashes as "1 2 3" (null: empty).

    The canonical CSV reader reads it back to the same rows, given ``--block-tokens``.
    """
    path = Path(path)
    _refuse_own_input(trace, path)
    table = trace.table
    if "block_hashes" in table.column_names:
        ids = table.column("block_hashes").cast(pa.list_(pa.string()))
        text = pc.binary_join(ids, " ")
        table = table.set_column(table.schema.get_field_index("block_hashes"), "block_hashes", text)
    with output_stream(path, fix="choose another -o") as fh:
        pacsv.write_csv(table, fh)


def _timestamps_ms(arrival_s: np.ndarray) -> list[int] | list[float]:
    """Mooncake's ms timestamps: whole numbers when the arrivals are whole ms (as Mooncake's)."""
    ms = arrival_s * 1000.0
    whole = np.round(ms)
    if np.all(np.abs(ms - whole) <= 1e-6):
        return [int(x) for x in whole]
    return [float(x) for x in ms]


def write_mooncake(trace: Trace, path: str | Path) -> None:
    """Mooncake JSONL, written atomically: timestamp (ms), input/output length, hash_ids.

    Only what the format has is written (see :func:`not_carried`); block hashes of other than
    512 tokens are read back with ``--block-tokens``.
    """
    path = Path(path)
    _refuse_own_input(trace, path)
    table = trace.table
    hashes = "block_hashes" in table.column_names
    with output_stream(path, fix="choose another -o") as fh:
        out = io.TextIOWrapper(fh, encoding="utf-8", newline="\n")
        for start in range(0, table.num_rows, JSONL_ROWS):
            part = table.slice(start, JSONL_ROWS)
            ts = _timestamps_ms(part.column("arrival_s").to_numpy())
            ins = part.column("input_tokens").to_pylist()
            outs = part.column("output_tokens").to_pylist()
            ids = part.column("block_hashes").to_pylist() if hashes else [None] * len(ts)
            for t, i, o, h in zip(ts, ins, outs, ids, strict=True):
                row = {"timestamp": t, "input_length": i, "output_length": o}
                if h is not None:
                    row["hash_ids"] = h
                out.write(json.dumps(row) + "\n")
        out.flush()
        out.detach()


def write_trace(trace: Trace, path: str | Path, fmt: str) -> None:
    """Write ``trace`` to ``path`` in ``fmt`` (parquet, csv or mooncake)."""
    writers = {"parquet": write_parquet, "csv": write_csv, "mooncake": write_mooncake}
    if fmt not in writers:
        raise ConfigError(
            f"--to {fmt!r}: not a format convert writes; use one of {', '.join(writers)}"
        )
    writers[fmt](trace, path)


def write_parquet(trace: Trace, path: str | Path) -> None:
    """Write atomically (temp file + rename); refuses to overwrite the trace's own source.

    Row groups hold about 128k rows; ``block_tokens``, the source format, the notes, the
    dropped-row counts and whether arrivals were measured go into the schema metadata, so
    reading the file back gives the same Trace.
    """
    path = Path(path)
    _refuse_own_input(trace, path)
    meta = canonical_metadata(
        trace.source_format,
        trace.block_tokens,
        notes=trace.notes,
        dropped=trace.dropped,
        arrivals_measured=trace.arrivals_measured,
    )
    table = trace.table.replace_schema_metadata(meta)
    # A file object, never the path: pyarrow deletes a path whose write failed (a device too).
    with output_stream(path, fix="choose another -o") as fh:
        pq.write_table(table, fh, row_group_size=ROW_GROUP_ROWS, compression="zstd")
