"""A streamed trace's rows on demand: the search's windows and the replay's rows, bounded.

The deployment search reads every request's arrival and lengths (to pick the busiest window,
:func:`kvadvisor.advice.recommend.busiest_window`) but replays only a window of rows; the
replay of the verdict reads the whole trace's rows only when `analyze` replays it at all
(``--replay-max-requests``). So a streamed trace keeps three per-request columns and reads the
chosen rows, with their block hashes, in one more pass over the stream each.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
import pyarrow as pa

from kvadvisor.advice.recommend import TraceView
from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.fleet import TraceArrays
from kvadvisor.pipeline.replay import ReplaySource
from kvadvisor.trace.arrays import RequestArrays
from kvadvisor.trace.model import Trace
from kvadvisor.trace.stream import TraceStream

# What a replay reads of a request: times, lengths and the prefix hashes.
ROW_COLUMNS = ("arrival_s", "input_tokens", "output_tokens", "block_hashes")


def stream_rows(stream: TraceStream, start: int, stop: int) -> Trace:
    """Requests ``start:stop`` (arrival order) of ``stream``, read in one pass, as a Trace.

    Only the rows asked for are held (batches before them are read and dropped; the pass stops
    after them), so the memory is that of ``stop - start`` rows whatever the trace's size.
    """
    narrow = stream.select(ROW_COLUMNS)
    parts: list[pa.RecordBatch] = []
    schema = None
    seen = 0
    for batch in narrow:
        schema = batch.schema
        first, seen = seen, seen + batch.num_rows
        if seen <= start:
            continue
        lo, hi = max(start - first, 0), min(stop - first, batch.num_rows)
        parts.append(batch.slice(lo, hi - lo))
        if seen >= stop:
            break
    table = (
        pa.Table.from_batches(parts, schema=schema)
        if schema is not None
        else pa.schema([]).empty_table()
    )
    return Trace(
        table=table,
        block_tokens=stream.block_tokens,
        source_format=stream.source_format,
        source_path=stream.path,
        arrivals_measured=stream.arrivals_measured,
    )


def whole_source(
    stream: TraceStream, exact: PrefixCacheResult | None
) -> Callable[[], tuple[Trace, ReplaySource]]:
    """The whole trace's rows and replay source, read on first use and then shared.

    ``exact``: the streamed exact pass over the same hashes, whose block ids the replay reuses
    (as the in-memory analysis hands its pass to the replay).
    """

    @lru_cache(maxsize=1)
    def load() -> tuple[Trace, ReplaySource]:
        trace = stream_rows(stream, 0, stream.requests)
        return trace, ReplaySource(RequestArrays.of(trace), exact)

    return load


def stream_view(
    stream: TraceStream,
    columns: Trace,
    whole: Callable[[], tuple[Trace, ReplaySource]],
) -> TraceView:
    """The streamed trace as the deployment search reads it (as ``assemble.trace_view``).

    ``columns``: every request's arrival and lengths (the stage profiler's table); ``whole``:
    the whole trace's replay source, used when the search asks for every row (a trace no
    larger than its sample), so the search and the replay share its LRU passes as in memory.
    """

    @lru_cache(maxsize=4)
    def rows(start: int, stop: int) -> TraceArrays:
        if (start, stop) == (0, stream.requests):
            return whole()[1].context.arrays
        return TraceArrays.from_arrays(RequestArrays.of(stream_rows(stream, start, stop)))

    return TraceView(
        arrival_s=np.asarray(columns.column_np("arrival_s"), dtype=np.float64),
        input_tokens=columns.column_np("input_tokens"),
        output_tokens=columns.column_np("output_tokens"),
        arrivals_measured=stream.arrivals_measured,
        has_hashes=stream.has_hashes,
        rows=rows,
        path=stream.path,
    )
