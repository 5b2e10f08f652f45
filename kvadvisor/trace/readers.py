"""Read a trace file in any supported format into a canonical Trace (the only trace file I/O)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from kvadvisor.errors import TraceFormatError
from kvadvisor.trace.model import META_BLOCK_TOKENS, META_SOURCE_FORMAT, Trace
from kvadvisor.trace.schema import build_trace
from kvadvisor.units import MS_PER_S

MOONCAKE_BLOCK_TOKENS = 512


def _check_file(path: Path) -> None:
    if not path.exists():
        raise TraceFormatError(f"{path}: no such file")
    if path.is_dir():
        raise TraceFormatError(f"{path}: is a directory; give a trace file")


def read_mooncake(path: Path) -> Trace:
    """Mooncake FAST'25 JSONL: timestamp (ms), input_length, output_length, hash_ids (512 tok)."""
    try:
        raw = pajson.read_json(path)
    except pa.ArrowInvalid as exc:
        raise TraceFormatError(f"{path}: not valid JSONL ({exc})") from None
    cols = {
        "arrival_s": pc.divide(pc.cast(raw["timestamp"], pa.float64()), MS_PER_S),
        "input_tokens": raw["input_length"],
        "output_tokens": raw["output_length"],
    }
    if "hash_ids" in raw.column_names:
        cols["block_hashes"] = raw["hash_ids"]
    return build_trace(
        pa.table(cols),
        path=str(path),
        source_format="mooncake",
        block_tokens=MOONCAKE_BLOCK_TOKENS,
    )


def read_parquet(path: Path) -> Trace:
    """Canonical parquet as written by ``kvadvisor convert``."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceFormatError(f"{path}: not a readable parquet file ({exc})") from None
    meta = table.schema.metadata or {}
    block_tokens = int(meta[META_BLOCK_TOKENS]) if META_BLOCK_TOKENS in meta else None
    fmt = meta.get(META_SOURCE_FORMAT, b"parquet").decode()
    return build_trace(
        table.replace_schema_metadata(None),
        path=str(path),
        source_format=fmt if fmt else "parquet",
        block_tokens=block_tokens,
    )


def read_trace(path: str | Path, trace_format: str | None = None) -> Trace:
    """Read ``path`` in ``trace_format`` (auto-detected when None) into a canonical Trace."""
    path = Path(path)
    _check_file(path)
    fmt = trace_format or ("parquet" if path.suffix == ".parquet" else "mooncake")
    if fmt == "parquet":
        return read_parquet(path)
    if fmt == "mooncake":
        return read_mooncake(path)
    raise TraceFormatError(f"{path}: unknown trace format '{fmt}'")
