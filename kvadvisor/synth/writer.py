"""Stream a synthetic trace to canonical parquet, one bounded row group per generated batch."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow.parquet as pq

from kvadvisor.errors import ConfigError
from kvadvisor.io.fileio import output_stream
from kvadvisor.synth.generate import DEFAULT_CHUNK_ROWS, SynthGenerator, synth_schema
from kvadvisor.synth.model import SynthShape
from kvadvisor.trace.writers import canonical_metadata

META_SYNTH_SHAPE = b"kvadvisor.synth_shape"
SOURCE_FORMAT = "synth"


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
    note = (
        f"synthetic trace (kvadvisor synth, seed {shape.seed}; "
        f"shape in {META_SYNTH_SHAPE.decode()})"
    )
    # The canonical keys (so readers treat it as canonical) plus the shape that made it.
    meta = canonical_metadata(SOURCE_FORMAT, shape.block_tokens, notes=(note,))
    meta[META_SYNTH_SHAPE] = shape_json.encode()
    schema = synth_schema().with_metadata(meta)
    batches = hashes = 0
    with (
        output_stream(path, fix="choose another -o") as fh,
        pq.ParquetWriter(fh, schema, compression="zstd") as writer,
    ):
        for batch in SynthGenerator(shape, chunk_rows):
            writer.write_batch(batch, row_group_size=batch.num_rows)
            batches += 1
            hashes += len(batch.column("block_hashes").values)
    return SynthWriteResult(str(path), shape.requests, batches, hashes, path.stat().st_size)
