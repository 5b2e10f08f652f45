"""Write a Trace as canonical parquet (block_tokens, source format and notes in the metadata)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow.parquet as pq

from kvadvisor.errors import ConfigError
from kvadvisor.fileio import output_stream
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


def write_parquet(trace: Trace, path: str | Path) -> None:
    """Write atomically (temp file + rename); refuses to overwrite the trace's own source.

    Row groups hold about 128k rows; ``block_tokens``, the source format, the notes, the
    dropped-row counts and whether arrivals were measured go into the schema metadata, so
    reading the file back gives the same Trace.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give an output file name")
    if path.exists() and path.resolve() == Path(trace.source_path).resolve():
        raise ConfigError(f"{path}: refusing to overwrite the input trace; choose another -o")
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
