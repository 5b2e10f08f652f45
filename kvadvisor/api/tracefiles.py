"""The public API for trace files: convert one (parquet, CSV, Mooncake), describe, synthesize.

What the `convert`, `info` and `synth` commands call; docs/api.md documents every function.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from kvadvisor.errors import ConfigError, KvAdvisorWarning
from kvadvisor.io.fileio import is_uri
from kvadvisor.synth import SynthShape, SynthWriteResult, write_synth_parquet
from kvadvisor.trace import TraceFormat, read_trace_path
from kvadvisor.trace.describe import TraceDescription, describe_trace
from kvadvisor.trace.formats import ColumnMap
from kvadvisor.trace.readers import detect_format
from kvadvisor.trace.writers import FORMATS, format_for, not_carried, write_trace

PathLike = str | os.PathLike[str]


def convert(
    trace: PathLike,
    output: PathLike,
    *,
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
    to: str | None = None,
) -> Path:
    """Read a trace in any supported format and write it as ``to`` (atomically).

    ``to``: "parquet" (canonical, lossless), "csv" (canonical CSV: every column, no metadata)
    or "mooncake" (Mooncake JSONL); default: what ``output``'s extension names (.parquet,
    .csv, .jsonl), else parquet. What the output cannot hold, or needs to be read back the
    same, is said as a :class:`KvAdvisorWarning` (columns Mooncake has no place for; the
    ``--block-tokens`` a CSV, or a Mooncake file of other than 512-token blocks, is read
    with). ``trace`` may be a directory of canonical parquet files; they become one file.
    """
    trace, output = os.fspath(trace), os.fspath(output)
    fmt = to or format_for(output) or "parquet"
    if fmt not in FORMATS:
        raise ConfigError(f"--to {fmt!r}: convert writes {', '.join(FORMATS)}")
    table = read_trace_path(trace, trace_format, column_map=column_map, block_tokens=block_tokens)
    write_trace(table, output, fmt)
    lost = not_carried(table, fmt)
    if lost:
        warnings.warn(
            f"{output}: Mooncake JSONL has no place for {', '.join(lost)}: not written "
            "(--to parquet keeps every column)",
            KvAdvisorWarning,
            stacklevel=2,
        )
    hashed = "block_hashes" in table.table.column_names and table.block_tokens is not None
    if hashed and (fmt == "csv" or (fmt == "mooncake" and table.block_tokens != 512)):
        what = "a CSV has no metadata" if fmt == "csv" else "Mooncake's blocks are 512 tokens"
        warnings.warn(
            f"{output}: the hash blocks are {table.block_tokens} tokens and {what}: read it "
            f"back with --block-tokens {table.block_tokens}",
            KvAdvisorWarning,
            stacklevel=2,
        )
    return Path(output)


def describe(
    trace: PathLike,
    *,
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
) -> TraceDescription:
    """A trace's format, size, span, columns and what each analysis can do with it.

    ``trace`` may be a directory of canonical parquet files or an object-store URI of them, as
    `analyze` takes.
    """
    trace = os.fspath(trace)
    read = read_trace_path(trace, trace_format, column_map=column_map, block_tokens=block_tokens)
    canonical = is_uri(trace) or Path(trace).is_dir()
    return describe_trace(
        read, trace_format or (TraceFormat.PARQUET if canonical else detect_format(Path(trace)))
    )


def synthesize(
    output: PathLike, shape: SynthShape | None = None, *, chunk_rows: int = 1 << 20
) -> SynthWriteResult:
    """Write a deterministic synthetic trace to parquet, a chunk of rows at a time.

    ``shape``: a :class:`SynthShape` (None: its defaults), e.g.
    ``SynthShape(requests=10_000, rate_per_s=50.0)``.
    """
    return write_synth_parquet(shape or SynthShape(), os.fspath(output), chunk_rows)
