"""Stream a synthetic trace to canonical parquet, one bounded row group per generated batch."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow.parquet as pq

from kvadvisor.errors import ConfigError
from kvadvisor.synth.generate import DEFAULT_CHUNK_ROWS, SynthGenerator, synth_schema
from kvadvisor.synth.model import SynthShape
from kvadvisor.trace.model import (
    META_ARRIVALS_MEASURED,
    META_BLOCK_TOKENS,
    META_DROPPED,
    META_NOTES,
    META_SOURCE_FORMAT,
)

META_SYNTH_SHAPE = b"kvadvisor.synth_shape"
SOURCE_FORMAT = "synth"


def _umask_mode() -> int:
    """The mode a new file gets under the process umask (mkstemp alone would give 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@dataclass(frozen=True)
class SynthWriteResult:
    """What was written: rows, row groups (batches), block hashes and file size in bytes."""

    path: str
    requests: int
    batches: int
    block_hashes: int
    file_bytes: int


def write_synth_parquet(
    shape: SynthShape, path: str | Path, chunk_rows: int = DEFAULT_CHUNK_ROWS
) -> SynthWriteResult:
    """Generate ``shape`` and write it to ``path`` atomically, never holding more than a chunk.

    block_tokens and the source format go into the schema metadata exactly as
    ``kvadvisor.trace.writers.write_parquet`` writes them; the shape goes beside them as JSON.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give an output file name (.parquet)")
    shape_json = json.dumps({**asdict(shape), "arrival": shape.arrival.value}, sort_keys=True)
    note = (f"synthetic trace (kvadvisor synth, seed {shape.seed}; "
            f"shape in {META_SYNTH_SHAPE.decode()})")
    # The same keys as kvadvisor.trace.writers.write_parquet, so readers treat it as canonical.
    meta = {
        META_SOURCE_FORMAT: SOURCE_FORMAT.encode(),
        META_BLOCK_TOKENS: str(shape.block_tokens).encode(),
        META_NOTES: json.dumps([note]).encode(),
        META_DROPPED: b"{}",
        META_ARRIVALS_MEASURED: b"true",
        META_SYNTH_SHAPE: shape_json.encode(),
    }
    schema = synth_schema().with_metadata(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    batches = hashes = 0
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for batch in SynthGenerator(shape, chunk_rows):
                writer.write_batch(batch, row_group_size=batch.num_rows)
                batches += 1
                hashes += len(batch.column("block_hashes").values)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return SynthWriteResult(str(path), shape.requests, batches, hashes, path.stat().st_size)
