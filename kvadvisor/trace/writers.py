"""Write a Trace as canonical parquet (block_tokens, source format and notes in the metadata)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from kvadvisor.errors import ConfigError
from kvadvisor.trace.model import (
    META_ARRIVALS_MEASURED,
    META_BLOCK_TOKENS,
    META_DROPPED,
    META_NOTES,
    META_SOURCE_FORMAT,
    Trace,
)

ROW_GROUP_ROWS = 128 * 1024


def _umask_mode() -> int:
    """The mode a newly created file gets under the process umask (mkstemp would give 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


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
    meta = {
        META_SOURCE_FORMAT: trace.source_format.encode(),
        META_NOTES: json.dumps(list(trace.notes)).encode(),
        META_DROPPED: json.dumps(dict(trace.dropped), sort_keys=True).encode(),
        META_ARRIVALS_MEASURED: b"true" if trace.arrivals_measured else b"false",
    }
    if trace.block_tokens is not None:
        meta[META_BLOCK_TOKENS] = str(trace.block_tokens).encode()
    table = trace.table.replace_schema_metadata(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS, compression="zstd")
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
