"""Stream a large trace in record batches, in arrival order: a parquet file or a directory.

Local, or in an object store (``s3://``, ``gs://``, ``az://``: :mod:`kvadvisor.trace.location`).
A directory may be hive-partitioned (``day=2025-01-01/hour=03/part-0.parquet``): partition
columns are not canonical and are dropped. Files are expected sorted by ``arrival_s`` inside (as
``convert`` and ``synth`` write them); files whose time ranges overlap are merged on the fly, so
memory stays at about one batch per overlapping file. Only the columns asked for are fetched, and
a time range (``since_s``, ``until_s``) is pushed down to the footers: files and row groups whose
``arrival_s`` statistics fall outside it are never read.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

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
from kvadvisor.trace.location import Location, check_exists, locate
from kvadvisor.trace.model import CANONICAL_COLUMNS, REQUIRED_COLUMNS, Trace
from kvadvisor.trace.readers import (
    StoredMetadata,
    one_line,
    read_trace,
    stored_metadata,
    unreadable_parquet,
)
from kvadvisor.trace.schema import (
    MAX_SPAN_S,
    build_trace,
    column_problems,
    missing_columns,
    shifted_note,
    shown,
)
from kvadvisor.units import plural
from kvadvisor.units.format import count, number

DEFAULT_BATCH_ROWS = 128 * 1024
# A streamed file whose arrivals span too long is read whole, to name the outlier row, up to
# this many rows (a few tens of MB); larger ones get the footer's range.
MAX_ROWS_TO_NAME_OUTLIER = 1_000_000
# Footers fetched at once from an object store: each is a round trip or two (tens of ms), so a
# partitioned week of traffic (thousands of files) opens in seconds, not minutes.
REMOTE_FOOTER_THREADS = 16


@dataclass(frozen=True)
class _File:
    path: str
    rows: int  # in the time range, when one is given
    min_arrival_s: float
    max_arrival_s: float
    block_values: int = 0
    uncompressed_bytes: int = 0
    row_groups: tuple[int, ...] | None = None  # those in the time range; None: every one
    stored_rows: int = 0


@dataclass(frozen=True)
class _Scan:
    """How files are read: the filesystem (None: local), how paths are shown, the time range."""

    filesystem: Any = None
    prefix: str = ""
    since_s: float | None = None
    until_s: float | None = None

    @property
    def ranged(self) -> bool:
        return self.since_s is not None or self.until_s is not None

    def keep(self, arrival: np.ndarray) -> np.ndarray:
        """Which arrivals fall in [since_s, until_s)."""
        mask = np.ones(len(arrival), dtype=bool)
        if self.since_s is not None:
            mask &= arrival >= self.since_s
        if self.until_s is not None:
            mask &= arrival < self.until_s
        return mask

    def overlaps(self, lo: float, hi: float) -> bool:
        """Whether a row group whose arrivals run from lo to hi may hold one in the range."""
        return (self.since_s is None or hi >= self.since_s) and (
            self.until_s is None or lo < self.until_s
        )

    def range_text(self) -> str:
        """The range as the options that set it."""
        words = []
        if self.since_s is not None:
            words.append(f"--since {self.since_s:.15g}")  # exact: the option as it is typed
        if self.until_s is not None:
            words.append(f"--until {self.until_s:.15g}")  # exact: the option as it is typed
        return " ".join(words)


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
    _scan: _Scan = _Scan()

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
                batches = _checked_batches(cluster[0], self.columns, self.batch_rows, self._scan)
            else:
                batches = _merge(cluster, self.columns, self.batch_rows, self._scan)
            for batch in batches:
                yield self._shift(batch)

    def parts(self) -> tuple[TraceStream, ...]:
        """The stream cut between files whose time ranges do not overlap, parts in time order.

        Together the parts are this stream's rows in the same order. Each part reads one group
        of overlapping files (merged by arrival as this stream merges them; with partitions by
        time, one partition), with this stream's shift of ``arrival_s``; its ``requests`` and
        ``block_accesses`` are its files' own (from the footers). A stream held in memory is
        one part.
        """
        if self._table is not None or len(self._clusters) <= 1:
            return (self,)
        return tuple(
            replace(
                self,
                requests=sum(f.rows for f in cluster),
                files=tuple(self._scan.prefix + f.path for f in cluster),
                block_accesses=(
                    sum(f.block_values for f in cluster) if "block_hashes" in self.columns else 0
                ),
                table_bytes=sum(f.uncompressed_bytes for f in cluster),
                _clusters=(cluster,),
            )
            for cluster in self._clusters
        )

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
        local = self._scan.filesystem is None and not self._scan.ranged
        if local and len(self.files) == 1 and Path(self.path).is_file():
            return read_trace(Path(self.path), "parquet")
        batches = list(self)
        table = pa.Table.from_batches(batches) if batches else pa.schema([]).empty_table()
        shift = (shifted_note(self.arrival_offset_s),) if self.arrival_offset_s else ()
        # In a time range, the files with no request in it were not read past their footers.
        read = sum(len(c) for c in self._clusters) if self._scan.ranged else len(self.files)
        return build_trace(
            table,
            path=self.path,
            source_format=self.source_format,
            block_tokens=self.block_tokens,
            dropped=dict(self.dropped),
            arrivals_measured=self.arrivals_measured,
            notes=self.notes + (f"read from {plural(read, 'parquet file')}",) + shift,
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
    """:func:`~kvadvisor.trace.readers.read_trace`, or canonical parquet in a directory or a URI.

    A directory (hive partitions too) or an object-store URI is what `analyze` streams; the
    commands that need the trace in memory (`info`, `convert`, `review`) read it whole through
    the same stream. Its files are canonical already, so the options that reshape a source do
    not apply.
    """
    location = locate(path)
    if not location.remote and not Path(path).is_dir():
        return read_trace(path, trace_format, column_map=column_map, block_tokens=block_tokens)
    what = "an object-store URI" if location.remote else "a directory"
    fmt = parse_format(trace_format)
    if fmt not in (None, TraceFormat.PARQUET):
        raise ConfigError(
            f"{path}: {what} is read as canonical parquet files, not {fmt.value}; drop "
            "--trace-format or give one local trace file"
        )
    if column_map or block_tokens is not None:
        raise ConfigError(
            f"{path}: {what} holds canonical parquet files, which --map and --block-tokens "
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
    *,
    since_s: float | None = None,
    until_s: float | None = None,
) -> TraceStream:
    """Open a parquet file or a directory of them (hive partitions too), local or remote.

    Reads only footers (row counts, arrival_s statistics, value counts, schema metadata) until
    iterated; ``block_accesses`` and ``table_bytes`` (uncompressed) come from them.
    ``columns`` limits the canonical columns read (required columns are always read).
    ``since_s``/``until_s`` keep the requests with ``since_s <= arrival_s < until_s`` on the
    files' own clock (as stored, before the first request is shifted to 0); the row groups
    outside are skipped, and a note says how many requests of how many were kept.
    """
    location = locate(path)
    scan = _Scan(location.filesystem, location.prefix, since_s, until_s)
    if since_s is not None and until_s is not None and not since_s < until_s:
        raise ConfigError(
            f"--since {since_s:.15g} --until {until_s:.15g}: an empty range; "  # exact: as typed
            "--since must come before --until"
        )
    in_directory = _check_present(location, path)
    try:
        # pyarrow.dataset (and the pandas it pulls in) costs ~0.4 s to import: only the
        # streaming path needs it, so other commands do not pay for it.
        import pyarrow.dataset as ds

        dataset = ds.dataset(
            location.path, filesystem=location.filesystem, format="parquet", partitioning="hive"
        )
        files = sorted(dataset.files)
    except FileNotFoundError:
        raise TraceNotFoundError(
            f"{location.uri}: no such file or directory", location.uri
        ) from None
    except (pa.ArrowInvalid, OSError) as exc:
        if not in_directory:
            raise unreadable_parquet(location.uri, exc) from None
        raise TraceFormatError(
            f"{location.uri}: not readable as parquet ({one_line(exc)}); every file in a trace "
            "directory must be canonical parquet: move other files out, or write damaged ones "
            "again with `kvadvisor convert`"
        ) from None
    if not files:
        raise TraceFormatError(
            f"{location.uri}: no parquet files found; give a directory of canonical parquet files "
            "(`kvadvisor convert` writes them) or a trace file"
        )
    present = [c for c in CANONICAL_COLUMNS if c in dataset.schema.names]
    missing = [c for c in REQUIRED_COLUMNS if c not in present]
    if missing:
        raise missing_columns(
            location.uri,
            missing,
            "required column missing; convert the files with `kvadvisor convert`",
        )
    wanted = tuple(c for c in present if columns is None or c in columns or c in REQUIRED_COLUMNS)
    infos, block_tokens, fmt, notes, dropped, measured = _footers(files, in_directory, scan)
    clusters = _clusters(infos)
    first = min((f.min_arrival_s for f in infos if f.rows), default=0.0)
    last = max((f.max_arrival_s for f in infos if f.rows), default=0.0)
    rows = sum(f.rows for f in infos)
    if scan.ranged:
        notes = notes + (_range_note(scan, rows, sum(f.stored_rows for f in infos)),)
        if rows == 0:
            raise TraceFormatError(
                f"{location.uri}: no request arrives in {scan.range_text()} (of "
                f"{count(sum(f.stored_rows for f in infos))} requests; the range is on arrival_s "
                "as the files store it, before the first request is shifted to 0)"
            )
    if not (math.isfinite(first) and math.isfinite(last) and last - first <= MAX_SPAN_S):
        # Footer statistics only: the rows themselves are checked as they stream, and a
        # trace this long would size every time series by its span. A file small enough to
        # read whole is read, so the message names the outlier row.
        if not location.remote and not in_directory and rows <= MAX_ROWS_TO_NAME_OUTLIER:
            read_trace(Path(path), "parquet")
        first, last = first + 0.0, last + 0.0  # no "-0" in the message
        raise TraceFormatError(
            f"{location.uri}: arrival_s runs from {shown(first)} to {shown(last)} s, more than the "
            f"{number(MAX_SPAN_S)} s (31.7 years) a trace may span, or not finite: an outlier "
            "row or a unit mistake; `kvadvisor info` on the file names the row"
        )
    return TraceStream(
        path=location.uri,
        source_format=fmt,
        block_tokens=block_tokens,
        columns=wanted,
        requests=rows,
        files=tuple(location.shown(f) for f in files),
        batch_rows=batch_rows,
        arrival_offset_s=first,
        block_accesses=sum(f.block_values for f in infos) if "block_hashes" in wanted else 0,
        table_bytes=sum(f.uncompressed_bytes for f in infos),
        duration_s=last - first,
        notes=notes,
        dropped=dropped,
        arrivals_measured=measured,
        _clusters=clusters,
        _scan=scan,
    )


def _check_present(location: Location, path: str | Path) -> bool:
    """Refuse a trace that is not there; whether it is a directory (or an object-store prefix)."""
    if location.remote:
        return check_exists(location)
    if not Path(path).exists():
        raise TraceNotFoundError(f"{path}: no such file or directory", str(path))
    return Path(path).is_dir()


def _range_note(scan: _Scan, kept: int, stored: int) -> str:
    return (
        f"{scan.range_text()}: {count(kept)} of {count(stored)} requests kept (arrival_s as "
        "stored; row groups outside the range were not read)"
    )


@dataclass(frozen=True)
class _Footer:
    """One file's rows and arrival range (in the time range) and its stored metadata."""

    info: _File
    stored: StoredMetadata


def _footers(
    files: list[str], in_directory: bool = False, scan: _Scan = _Scan()
) -> tuple[list[_File], int | None, str, tuple[str, ...], dict[str, int], bool]:
    """Row counts and arrival ranges from footers; block_tokens must agree across files.

    Also the notes (each once, in file order), dropped-row counts (summed) and whether every
    file's arrivals were measured, which ``convert`` and ``synth`` store in the metadata.
    Footers in an object store are fetched on threads (each is a network round trip).
    """
    if scan.filesystem is not None and len(files) > 1:
        with ThreadPoolExecutor(min(REMOTE_FOOTER_THREADS, len(files))) as pool:
            footers = list(pool.map(lambda name: _footer(name, in_directory, scan), files))
    else:
        footers = [_footer(name, in_directory, scan) for name in files]
    block_tokens = {f.stored.block_tokens for f in footers}
    formats = {f.stored.source_format for f in footers}
    notes: dict[str, None] = {}
    dropped: dict[str, int] = {}
    for footer in footers:
        notes.update(dict.fromkeys(footer.stored.notes))
        for reason, rows in footer.stored.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + rows
    measured = all(f.stored.arrivals_measured for f in footers)
    if len(block_tokens) > 1:
        found = ", ".join(sorted(str(b) for b in block_tokens))
        raise TraceFormatError(
            f"{scan.prefix}{files[0]}: files disagree on block_tokens ({found}); hashes of "
            "different block sizes cannot be mixed: analyze them separately"
        )
    fmt = formats.pop() if len(formats) == 1 else "parquet"
    return [f.info for f in footers], block_tokens.pop(), fmt, tuple(notes), dropped, measured


def _footer(name: str, in_directory: bool, scan: _Scan) -> _Footer:
    """One file's footer: its rows and arrival range (in the time range) and stored metadata."""
    shown_name = scan.prefix + name
    try:
        pf = pq.ParquetFile(name, filesystem=scan.filesystem)
    except (pa.ArrowInvalid, OSError) as exc:
        raise unreadable_parquet(shown_name, exc, in_directory=in_directory) from None
    stored = stored_metadata(shown_name, pf.schema_arrow.metadata)
    md = pf.metadata
    ranges = _group_ranges(pf, shown_name)
    groups = [rg for rg in range(md.num_row_groups) if md.row_group(rg).num_rows]
    if scan.ranged:
        groups = [rg for rg in groups if scan.overlaps(*ranges[rg])]
    rows, lo, hi = 0, np.inf, -np.inf
    used = []  # the groups holding a row in the range: the only ones the stream reads
    for rg in groups:
        g_lo, g_hi = ranges[rg]
        n = md.row_group(rg).num_rows
        if scan.ranged and not scan.keep(np.array([g_lo, g_hi])).all():
            # Partly in the range: only this group's arrival_s is read, to count its rows.
            arrival = _read_arrivals(pf, rg, shown_name)
            arrival = arrival[scan.keep(arrival)]
            n = len(arrival)
            if n:
                g_lo, g_hi = float(arrival.min()), float(arrival.max())
        if n:
            rows, lo, hi = rows + n, min(lo, g_lo), max(hi, g_hi)
            used.append(rg)
    groups = used
    leaf = [
        i for i in range(md.num_columns) if md.schema.column(i).path.split(".")[0] == "block_hashes"
    ]
    # A list column's leaf count is its value count (plus one per empty or null list):
    # an upper bound on block accesses, known before reading a byte of data.
    values = sum(md.row_group(rg).column(i).num_values for rg in groups for i in leaf)
    size = sum(md.row_group(rg).total_byte_size for rg in groups)
    kept = tuple(groups) if scan.ranged else None
    info = _File(name, rows, lo, hi, values, size, kept, md.num_rows)
    return _Footer(info, stored)


def _read_arrivals(pf: pq.ParquetFile, rg: int, name: str) -> np.ndarray:
    """One row group's arrival_s as float64 (nulls as NaN: the stream names them later)."""
    try:
        values = pf.read_row_group(rg, columns=["arrival_s"])["arrival_s"]
    except (pa.ArrowInvalid, OSError) as exc:
        raise unreadable_parquet(name, exc) from None
    return pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)


def _group_ranges(pf: pq.ParquetFile, name: str) -> list[tuple[float, float]]:
    """Min and max arrival_s per row group, from statistics or by reading the column if absent.

    An empty row group is (inf, -inf).
    """
    meta = pf.metadata
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
    ranges: list[tuple[float, float]] = []
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        stats = group.column(col).statistics if col >= 0 else None
        if not group.num_rows:
            ranges.append((np.inf, -np.inf))
        elif stats is not None and stats.has_min_max:
            ranges.append((float(stats.min), float(stats.max)))
        else:
            arrival = _read_arrivals(pf, rg, name)
            if np.isnan(arrival).all():  # every arrival_s of the group is empty
                first = sum(meta.row_group(g).num_rows for g in range(rg)) + 1
                raise TraceSchemaError(
                    name,
                    [Problem(first, "arrival_s", TraceProblem.NULL_VALUE, "empty")],
                    total=meta.num_rows,
                )
            ranges.append((float(np.nanmin(arrival)), float(np.nanmax(arrival))))
    return ranges


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
    file: _File, columns: tuple[str, ...], batch_rows: int, scan: _Scan = _Scan()
) -> Iterator[pa.RecordBatch]:
    """One file's batches, canonical and checked to be in arrival order, in the time range."""
    name = scan.prefix + file.path
    last = -np.inf
    # pre_buffer would read ahead whole row groups: 4x the peak memory on 1M-row groups.
    try:
        reader = pq.ParquetFile(file.path, pre_buffer=False, filesystem=scan.filesystem)
    except (pa.ArrowInvalid, OSError) as exc:
        raise unreadable_parquet(name, exc) from None
    if file.row_groups is None:
        parts = [(0, reader.iter_batches(batch_size=batch_rows, columns=list(columns)))]
    else:
        # Group by group, so a row number in a message counts the groups skipped before it.
        starts = np.cumsum(
            [0]
            + [reader.metadata.row_group(g).num_rows for g in range(reader.metadata.num_row_groups)]
        )
        parts = [
            (
                int(starts[g]),
                reader.iter_batches(batch_size=batch_rows, row_groups=[g], columns=list(columns)),
            )
            for g in file.row_groups
        ]
    for row, batches in parts:
        while True:
            try:
                raw = next(batches, None)
            except (pa.ArrowInvalid, OSError) as exc:
                # The footer read fine when the stream opened: the damage is in a data page.
                raise unreadable_parquet(name, exc) from None
            if raw is None:
                break
            batch = _canonical(raw, name, row)
            arrival = batch.column("arrival_s").to_numpy()
            if len(arrival):
                back = np.flatnonzero(np.diff(arrival, prepend=last) < 0)
                if len(back):
                    raise _unsorted(name, row + int(back[0]) + 1)
                last = arrival[-1]
            row += batch.num_rows
            if scan.ranged:
                keep = scan.keep(arrival)
                if not keep.all():
                    batch = batch.filter(pa.array(keep))
            if batch.num_rows:
                yield batch


def _merge(
    files: tuple[_File, ...], columns: tuple[str, ...], batch_rows: int, scan: _Scan = _Scan()
) -> Iterator[pa.RecordBatch]:
    """K-way merge of sorted files by a watermark: emit rows earlier than every file's buffer end.

    Rows at the watermark wait until every file has buffered past it, so ties keep file order.
    """
    sources = [_checked_batches(f, columns, batch_rows, scan) for f in files]
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
