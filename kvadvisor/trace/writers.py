"""Write a Trace as canonical parquet (block_tokens and source format in the schema metadata)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from kvadvisor.errors import ConfigError
from kvadvisor.trace.model import META_BLOCK_TOKENS, META_SOURCE_FORMAT, Trace

ROW_GROUP_ROWS = 128 * 1024


def write_parquet(trace: Trace, path: str | Path) -> None:
    """Write atomically (temp file + rename); refuses to overwrite the trace's own source."""
    path = Path(path)
    if path.exists() and path.resolve() == Path(trace.source_path).resolve():
        raise ConfigError(f"{path}: refusing to overwrite the input trace; choose another -o")
    meta = {META_SOURCE_FORMAT: trace.source_format.encode()}
    if trace.block_tokens is not None:
        meta[META_BLOCK_TOKENS] = str(trace.block_tokens).encode()
    table = trace.table.replace_schema_metadata(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS, compression="zstd")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
