"""Stream a large trace in record batches, in arrival order: one parquet file or a directory.

A directory may be hive-partitioned (``day=2025-01-01/hour=03/part-0.parquet``): partition
columns are not canonical and are dropped. Files are expected sorted by ``arrival_s`` inside (as
``convert`` and ``synth`` write them); files whose time ranges overlap are merged on the fly, so
memory stays at about one batch per overlapping file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kvadvisor.errors import (
    ConfigError,
    Problem,
    TraceFormatError,
    TraceNotFoundError,
    TraceProblem,
    TraceSchemaError,
)
from kvadvisor.trace.detect import TraceFormat, parse_format
from kvadvisor.trace.formats import ColumnSource
from kvadvisor.trace.model import CANONICAL_COLUMNS, REQUIRED_COLUMNS, Trace
from kvadvisor.trace.readers import one_line, read_trace, stored_metadata, unreadable_parquet
from kvadvisor.trace.schema import (
    MAX_SPAN_S,
    build_trace,
    column_problems,
    missing_columns,
    shifted_note,
    shown,
)
from kvadvisor.units import plural
from kvadvisor.units.format import number

DEFAULT_BATCH_ROWS = 128 * 1024
# A streamed file whose arrivals span too long is read whole, to name the outlier row, up to
# this many rows (a few tens of MB); larger ones get the footer's range.
MAX_ROWS_TO_NAME_OUTLIER = 1_000_000


@dataclass(frozen=True)
class _File:
    path: str
    rows: int
    min_arrival_s: float
    max_arrival_s: float
    block_values: int = 0
    uncompressed_bytes: int = 0


@dataclass(frozen=True)
class TraceStream:
    """A trace too large to hold at once: metadata up front, canonical record batches on demand.

    Iterating yields ``pa.RecordBatch`` es of canonical columns (``columns``), in arrival order
    (ties keep file order, files in path order), with ``arrival_s`` shifted by
    ``arrival_offset_s`` so the first request arrives at 0. Each batch has at most about
    ``batch_rows`` rows per file whose time range overlaps another's.
    """

    path: str
    source_format: str
    block_tokens: int | None
    columns: tuple[str, ...]
    requests: int
    files: tuple[str, ...]
    batch_rows: int = DEFAULT_BATCH_ROWS
    arrival_offset_s: float = 0.0
    block_accesses: int = 0
    table_bytes: int = 0
    duration_s: float = 0.0
    notes: tuple[str, ...] = ()
    dropped: Mapping[str, int] = field(default_factory=dict)
    # False when any file says its arrivals were not measured (benchmark results without
    # start times), as read_trace reads the same key from one file.
    arrivals_measured: bool = True
    _table: pa.Table | None = None
    _clusters: tuple[tuple[_File, ...], ...] = ()

    @property
    def has_hashes(self) -> bool:
        """Whether prefix block hashes are present (prefix reuse can be measured)."""
        return "block_hashes" in self.columns and self.block_tokens is not None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """Canonical batches in arrival order."""
        if self._table is not None:
            yield from self._table.select(list(self.columns)).to_batches(self.batch_rows)
            return
        for cluster in self._clusters:
            if len(cluster) == 1:
                batches = _checked_batches(cluster[0].path, self.columns, self.batch_rows)
            else:
                batches = _merge(cluster, self.columns, self.batch_rows)
            for batch in batches:
                yield self._shift(batch)

    def select(self, columns: tuple[str, ...]) -> TraceStream:
        """The same stream reading only ``columns`` (those present; required ones always)."""
        keep = tuple(c for c in self.columns if c in columns or c in REQUIRED_COLUMNS)
        return replace(self, columns=keep)

    def read_all(self) -> Trace:
        """The whole trace in memory (a single file goes through its ordinary reader)."""
        if self._table is not None:
            return build_trace(
                self._table,
                path=self.path,
                source_format=self.source_format,
                block_tokens=self.block_tokens,
                notes=self.notes,
                dropped=dict(self.dropped),
                arrivals_measured=self.arrivals_measured,
            )
        if len(self.files) == 1 and Path(self.path).is_file():
            return read_trace(Path(self.path), "parquet")
        batches = list(self)
        table = pa.Table.from_batches(batches) if batches else pa.schema([]).empty_table()
        shift = (shifted_note(self.arrival_offset_s),) if self.arrival_offset_s else ()
        return build_trace(
            table,
            path=self.path,
            source_format=self.source_format,
            block_tokens=self.block_tokens,
            dropped=dict(self.dropped),
            arrivals_measured=self.arrivals_measured,
            notes=self.notes + (f"read from {plural(len(self.files), 'parquet file')}",) + shift,
        )

    def _shift(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.arrival_offset_s == 0.0:
            return batch
        i = batch.schema.get_field_index("arrival_s")
        shifted = pc.subtract(batch.column(i), self.arrival_offset_s)
        return batch.set_column(i, "arrival_s", shifted)


def stream_trace(trace: Trace, batch_rows: int = DEFAULT_BATCH_ROWS) -> TraceStream:
    """An in-memory Trace seen as a stream (the same code path for every trace size)."""
    accesses = len(trace.hash_arrays()[1]) if "block_hashes" in trace.columns else 0
    return TraceStream(
        path=trace.source_path,
        source_format=trace.source_format,
        block_tokens=trace.block_tokens,
        columns=trace.columns,
        requests=trace.requests,
        files=(trace.source_path,),
        batch_rows=batch_rows,
        block_accesses=accesses,
        table_bytes=trace.table.nbytes,
        duration_s=trace.duration_s,
        notes=trace.notes,
        dropped=dict(trace.dropped),
        arrivals_measured=trace.arrivals_measured,
        _table=trace.table,
    )


def read_trace_path(
    path: str | Path,
    trace_format: str | TraceFormat | None = None,
    *,
    column_map: Mapping[str, ColumnSource] | Sequence[str] | None = None,
    block_tokens: int | None = None,
) -> Trace:
    """:func:`~kvadvisor.trace.readers.read_trace`, or a directory of canonical parquet whole.

    A directory (hive partitions too) is what `analyze` streams; the commands that need the
    trace in memory (`info`, `convert`, `review`) read it whole through the same stream. Its
    files are canonical already, so the options that reshape a source do not apply.
    """
    path = Path(path)
    if not path.is_dir():
        return read_trace(path, trace_format, column_map=column_map, block_tokens=block_tokens)
    fmt = parse_format(trace_format)
    if fmt not in (None, TraceFormat.PARQUET):
        raise ConfigError(
            f"{path}: a directory is read as canonical parquet files, not {fmt.value}; drop "
            "--trace-format or give one trace file"
        )
    if column_map or block_tokens is not None:
        raise ConfigError(
            f"{path}: a directory holds canonical parquet files, which --map and --block-tokens "
            "do not apply to; convert each file first (kvadvisor convert FILE --map ...)"
        )
    return open_trace_stream(path).read_all()


def seconds_stored(path: str | Path) -> bool:
    """Whether a parquet file's ``arrival_s`` is stored as seconds (a number), as streaming needs.

    False for wall-clock (timestamp) arrivals, which only the whole-file reader converts; True
    when the footer cannot be read or has no ``arrival_s`` (streaming then says what is wrong).
    """
    try:
        with pq.ParquetFile(path) as parquet_file:
            schema = parquet_file.schema_arrow
    except (pa.ArrowInvalid, OSError):
        return True
    index = schema.get_field_index("arrival_s")
    return index < 0 or not pa.types.is_timestamp(schema.field(index).type)


def open_trace_stream(
    path: str | Path,
    columns: tuple[str, ...] | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> TraceStream:
    """Open a parquet file or a directory of parquet files (hive partitions too) as a stream.

    Reads only footers (row counts, arrival_s statistics, value counts, schema metadata) until
    iterated; ``block_accesses`` and ``table_bytes`` (uncompressed) come from them.
    ``columns`` limits the canonical columns read (required columns are always read).
    """
    path = Path(path)
    if not path.exists():
        raise TraceNotFoundError(f"{path}: no such file or directory", str(path))
    try:
        # pyarrow.dataset (and the pandas it pulls in) costs ~0.4 s to import: only the
        # streaming path needs it, so other commands do not pay for it.
        import pyarrow.dataset as ds

        dataset = ds.dataset(str(path), format="parquet", partitioning="hive")
        files = sorted(dataset.files)
    except (pa.ArrowInvalid, OSError) as exc:
        if path.is_file():
            raise unreadable_parquet(path, exc) from None
        raise TraceFormatError(
            f"{path}: not readable as parquet ({one_line(exc)}); every file in a trace "
            "directory must be canonical parquet: move other files out, or write damaged ones "
            "again with `kvadvisor convert`"
        ) from None
    if not files:
        raise TraceFormatError(
            f"{path}: no parquet files found; give a directory of canonical parquet files "
            "(`kvadvisor convert` writes them) or a trace file"
        )
    present = [c for c in CANONICAL_COLUMNS if c in dataset.schema.names]
    missing = [c for c in REQUIRED_COLUMNS if c not in present]
    if missing:
        raise missing_columns(
            str(path),
            missing,
            "required column missing; convert the files with `kvadvisor convert`",
        )
    wanted = tuple(c for c in present if columns is None or c in columns or c in REQUIRED_COLUMNS)
    infos, block_tokens, fmt, notes, dropped, measured = _footers(files, path.is_dir())
    clusters = _clusters(infos)
    first = min((f.min_arrival_s for f in infos if f.rows), default=0.0)
    last = max((f.max_arrival_s for f in infos if f.rows), default=0.0)
    if not (math.isfinite(first) and math.isfinite(last) and last - first <= MAX_SPAN_S):
        # Footer statistics only: the rows themselves are checked as they stream, and a
        # trace this long would size every time series by its span. A file small enough to
        # read whole is read, so the message names the outlier row.
        rows = sum(f.rows for f in infos)
        if path.is_file() and rows <= MAX_ROWS_TO_NAME_OUTLIER:
            read_trace(path, "parquet")
        first, last = first + 0.0, last + 0.0  # no "-0" in the message
        raise TraceFormatError(
            f"{path}: arrival_s runs from {shown(first)} to {shown(last)} s, more than the "
            f"{number(MAX_SPAN_S)} s (31.7 years) a trace may span, or not finite: an outlier "
            "row or a unit mistake; `kvadvisor info` on the file names the row"
        )
    return TraceStream(
        path=str(path),
        source_format=fmt,
        block_tokens=block_tokens,
        columns=wanted,
        requests=sum(f.rows for f in infos),
        files=tuple(files),
        batch_rows=batch_rows,
        arrival_offset_s=first,
        block_accesses=sum(f.block_values for f in infos) if "block_hashes" in wanted else 0,
        table_bytes=sum(f.uncompressed_bytes for f in infos),
        duration_s=last - first,
        notes=notes,
        dropped=dropped,
        arrivals_measured=measured,
        _clusters=clusters,
    )


def _footers(
    files: list[str], in_directory: bool = False
) -> tuple[list[_File], int | None, str, tuple[str, ...], dict[str, int], bool]:
    """Row counts and arrival ranges from footers; block_tokens must agree across files.

    Also the notes (each once, in file order), dropped-row counts (summed) and whether every
    file's arrivals were measured, which ``convert`` and ``synth`` store in the metadata.
    """
    infos: list[_File] = []
    block_tokens: set[int | None] = set()
    formats: set[str] = set()
    notes: dict[str, None] = {}
    dropped: dict[str, int] = {}
    measured = True
    for name in files:
        try:
            pf = pq.ParquetFile(name)
        except (pa.ArrowInvalid, OSError) as exc:
            raise unreadable_parquet(name, exc, in_directory=in_directory) from None
        stored = stored_metadata(name, pf.schema_arrow.metadata)
        block_tokens.add(stored.block_tokens)
        formats.add(stored.source_format)
        notes.update(dict.fromkeys(stored.notes))
        measured = measured and stored.arrivals_measured
        for reason, rows in stored.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + rows
        lo, hi = _arrival_range(pf, name)
        md = pf.metadata
        leaf = [
            i
            for i in range(md.num_columns)
            if md.schema.column(i).path.split(".")[0] == "block_hashes"
        ]
        # A list column's leaf count is its value count (plus one per empty or null list):
        # an upper bound on block accesses, known before reading a byte of data.
        values = sum(
            md.row_group(rg).column(i).num_values for rg in range(md.num_row_groups) for i in leaf
        )
        size = sum(md.row_group(rg).total_byte_size for rg in range(md.num_row_groups))
        infos.append(_File(name, md.num_rows, lo, hi, values, size))
    if len(block_tokens) > 1:
        found = ", ".join(sorted(str(b) for b in block_tokens))
        raise TraceFormatError(
            f"{files[0]}: files disagree on block_tokens ({found}); hashes of different block "
            "sizes cannot be mixed: analyze them separately"
        )
    fmt = formats.pop() if len(formats) == 1 else "parquet"
    return infos, block_tokens.pop(), fmt, tuple(notes), dropped, measured


def _arrival_range(pf: pq.ParquetFile, name: str) -> tuple[float, float]:
    """Min and max arrival_s from row-group statistics, or by reading the column if absent."""
    meta = pf.metadata
    if meta.num_rows == 0:
        return np.inf, -np.inf
    col = pf.schema_arrow.get_field_index("arrival_s")
    arrival_type = pf.schema_arrow.field(col).type if col >= 0 else None
    if arrival_type is not None and not (
        pa.types.is_integer(arrival_type) or pa.types.is_floating(arrival_type)
    ):
        # Statistics of a text or timestamp column are not seconds; the in-memory reader
        # converts wall-clock times, so `convert` fixes the file.
        raise TraceSchemaError(
            name,
            [
                Problem(
                    None,
                    "arrival_s",
                    TraceProblem.WRONG_TYPE,
                    f"{arrival_type} is not seconds (a number); `kvadvisor convert` turns"
                    " wall-clock "
                    "times into seconds",
                )
            ],
        )
    lows, highs = [], []
    for rg in range(meta.num_row_groups):
        stats = meta.row_group(rg).column(col).statistics if col >= 0 else None
        if stats is None or not stats.has_min_max:
            try:
                values = pf.read(columns=["arrival_s"])["arrival_s"]
            except (pa.ArrowInvalid, OSError) as exc:
                raise unreadable_parquet(name, exc) from None
            lo, hi = pc.min(values).as_py(), pc.max(values).as_py()
            if lo is None:  # every arrival_s is empty
                raise TraceSchemaError(
                    name,
                    [Problem(1, "arrival_s", TraceProblem.NULL_VALUE, "empty")],
                    total=meta.num_rows,
                )
            return float(lo), float(hi)
        if meta.row_group(rg).num_rows:
            lows.append(float(stats.min))
            highs.append(float(stats.max))
    return min(lows), max(highs)


def _clusters(infos: list[_File]) -> tuple[tuple[_File, ...], ...]:
    """Group files whose arrival ranges overlap; groups follow each other in time."""
    ordered = sorted((f for f in infos if f.rows), key=lambda f: f.min_arrival_s)
    clusters: list[list[_File]] = []
    end = -np.inf
    for f in ordered:
        # Touching ranges (equal timestamps) must merge too, so ties keep file order.
        if clusters and f.min_arrival_s <= end:
            clusters[-1].append(f)
        else:
            clusters.append([f])
        end = max(end, f.max_arrival_s)
    return tuple(tuple(sorted(c, key=lambda f: f.path)) for c in clusters)


def _canonical(batch: pa.RecordBatch, name: str, first_row: int) -> pa.RecordBatch:
    """Cast to canonical types and check required values (rows are 1-based within the file)."""
    arrays = []
    problems: list[Problem] = []
    for column in batch.schema:
        target, _ = CANONICAL_COLUMNS[column.name]
        col = batch.column(column.name)
        if col.type != target:
            try:
                col = pc.cast(col, target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                problems.append(
                    Problem(
                        None,
                        column.name,
                        TraceProblem.WRONG_TYPE,
                        f"{col.type} is not {target}; `kvadvisor convert` names the first bad cell",
                    )
                )
                continue
        problems += column_problems(column.name, col, first_row)
        arrays.append(col)
    if problems:
        raise TraceSchemaError(name, problems)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _unsorted(name: str, row: int) -> TraceFormatError:
    return TraceFormatError(
        f"{name}: row {row}: arrival_s goes back in time; a streamed file must be sorted by "
        "arrival_s (`kvadvisor convert` sorts it)"
    )


def _checked_batches(
    name: str, columns: tuple[str, ...], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """One file's batches, canonical and checked to be in arrival order."""
    last = -np.inf
    row = 0
    # pre_buffer would read ahead whole row groups: 4x the peak memory on 1M-row groups.
    reader = pq.ParquetFile(name, pre_buffer=False)
    batches = reader.iter_batches(batch_size=batch_rows, columns=list(columns))
    while True:
        try:
            raw = next(batches, None)
        except (pa.ArrowInvalid, OSError) as exc:
            # The footer read fine when the stream opened: the damage is in a data page.
            raise unreadable_parquet(name, exc) from None
        if raw is None:
            return
        batch = _canonical(raw, name, row)
        arrival = batch.column("arrival_s").to_numpy()
        if len(arrival):
            back = np.flatnonzero(np.diff(arrival, prepend=last) < 0)
            if len(back):
                raise _unsorted(name, row + int(back[0]) + 1)
            last = arrival[-1]
        row += batch.num_rows
        yield batch


def _merge(
    files: tuple[_File, ...], columns: tuple[str, ...], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """K-way merge of sorted files by a watermark: emit rows earlier than every file's buffer end.

    Rows at the watermark wait until every file has buffered past it, so ties keep file order.
    """
    sources = [_checked_batches(f.path, columns, batch_rows) for f in files]
    buffers: list[pa.Table | None] = [None] * len(files)
    done = [False] * len(files)

    def load(i: int) -> None:
        batch = next(sources[i], None)
        if batch is None:
            done[i] = True
            return
        table = pa.Table.from_batches([batch])
        buffers[i] = table if buffers[i] is None else pa.concat_tables([buffers[i], table])

    for i in range(len(files)):
        load(i)
    while True:
        for i in range(len(files)):
            while not done[i] and (buffers[i] is None or buffers[i].num_rows == 0):
                load(i)
        ends = {
            i: buffers[i]["arrival_s"][-1].as_py()
            for i in range(len(files))
            if not done[i] and buffers[i] is not None and buffers[i].num_rows
        }
        if not any(b is not None and b.num_rows for b in buffers):
            return
        watermark = min(ends.values()) if ends else np.inf
        parts, file_ids = [], []
        for i, buf in enumerate(buffers):
            if buf is None or buf.num_rows == 0:
                continue
            arrival = buf["arrival_s"].to_numpy()
            cut = int(np.searchsorted(arrival, watermark, side="left"))
            if cut:
                parts.append(buf.slice(0, cut))
                file_ids.append(np.full(cut, i))
                buffers[i] = buf.slice(cut)
        if not parts:
            load(min(ends, key=ends.__getitem__))
            continue
        merged = pa.concat_tables(parts)
        order = np.lexsort((np.concatenate(file_ids), merged["arrival_s"].to_numpy()))
        yield from merged.take(pa.array(order)).combine_chunks().to_batches()
