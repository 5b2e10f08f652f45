"""The public API for trace files: convert one to canonical parquet, describe it, synthesize one.

What the `convert`, `info` and `synth` commands call; docs/api.md documents every function.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvadvisor.synth import ArrivalProcess, SynthShape, SynthWriteResult, write_synth_parquet
from kvadvisor.trace import TraceFormat, read_trace_path
from kvadvisor.trace.describe import TraceDescription, describe_trace
from kvadvisor.trace.formats import ColumnSource
from kvadvisor.trace.readers import detect_format
from kvadvisor.trace.writers import write_parquet

PathLike = str | os.PathLike[str]
ColumnMap = Mapping[str, ColumnSource] | Sequence[str] | None


def convert(
    trace: PathLike,
    output: PathLike,
    *,
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
) -> Path:
    """Read a trace in any supported format and write it as canonical parquet (atomically).

    ``trace`` may be a directory of canonical parquet files; they are written as one file.
    """
    table = read_trace_path(trace, trace_format, column_map=column_map, block_tokens=block_tokens)
    write_parquet(table, output)
    return Path(output)


def describe(
    trace: PathLike,
    *,
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
) -> TraceDescription:
    """A trace's format, size, span, columns and what each analysis can do with it.

    ``trace`` may be a directory of canonical parquet files, as `analyze` takes.
    """
    read = read_trace_path(trace, trace_format, column_map=column_map, block_tokens=block_tokens)
    path = Path(trace)
    return describe_trace(
        read, trace_format or (TraceFormat.PARQUET if path.is_dir() else detect_format(path))
    )


def synthesize(
    output: PathLike,
    shape: SynthShape | None = None,
    *,
    chunk_rows: int = 1 << 20,
    **shape_fields: Any,
) -> SynthWriteResult:
    """Write a deterministic synthetic trace to parquet, a chunk of rows at a time.

    The shape is ``shape``, or :class:`SynthShape`'s fields given by name (``arrival`` as
    "poisson" or "bursty").
    """
    if "arrival" in shape_fields:
        shape_fields["arrival"] = ArrivalProcess(shape_fields["arrival"])
    shape = SynthShape(**shape_fields) if shape is None else shape
    return write_synth_parquet(shape, output, chunk_rows)
