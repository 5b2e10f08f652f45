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


def _busiest_pass(stream: TraceStream, size: int) -> tuple[int, int, float, float, float]:
    """The busiest window of ``size`` rows in one pass: (start, stop, first, t_start, t_last).

    Keeps the last ``size - 1`` arrivals across batches, so the memory is ``size`` floats; the
    first window of least span wins, as in :func:`~kvadvisor.advice.recommend.busiest_window`.
    """
    carry = np.zeros(0)
    best, best_start, seen = np.inf, 0, 0
    first, ends = None, (0.0, 0.0)
    for batch in stream.select(("arrival_s",)):
        a = np.asarray(batch.column("arrival_s").to_numpy(zero_copy_only=False), np.float64)
        if first is None and a.size:
            first = float(a[0])
        x = np.concatenate([carry, a])
        base = seen - carry.size  # row number of x[0]
        if x.size >= size:
            spans = x[size - 1 :] - x[: x.size - size + 1]
            k = int(np.argmin(spans))
            if spans[k] < best:
                best, best_start = float(spans[k]), base + k
                ends = (float(x[k]), float(x[k + size - 1]))
        seen += a.size
        carry = x[max(x.size - (size - 1), 0) :] if size > 1 else np.zeros(0)
    if seen <= size:  # the whole trace: its first and last arrivals
        best_start = 0
        ends = (first or 0.0, float(carry[-1]) if carry.size else first or 0.0)
    return best_start, min(best_start + size, seen), first or 0.0, *ends


class StreamedView(TraceView):
    """A trace too large to hold per request, as the search reads it: windows found by passes.

    The busiest window is found in one pass over the arrivals (per window size asked, cached);
    ``longest`` comes from the pass that summed the trace. No per-request column is held.
    """

    def __init__(
        self,
        stream: TraceStream,
        longest: tuple[int, int],
        whole: Callable[[], tuple[Trace, ReplaySource]],
    ) -> None:
        """``longest``: (prompt + output, prompt) tokens of the longest requests."""
        empty = np.zeros(0)

        @lru_cache(maxsize=4)
        def rows(start: int, stop: int) -> TraceArrays:
            if (start, stop) == (0, stream.requests):
                return whole()[1].context.arrays
            return TraceArrays.from_arrays(RequestArrays.of(stream_rows(stream, start, stop)))

        super().__init__(
            arrival_s=empty,
            input_tokens=empty,
            output_tokens=empty,
            arrivals_measured=stream.arrivals_measured,
            has_hashes=stream.has_hashes,
            rows=rows,
            path=stream.path,
        )
        object.__setattr__(self, "_stream", stream)
        object.__setattr__(self, "_longest", longest)
        object.__setattr__(self, "_times", {})
        object.__setattr__(self, "_windows", {})

    @property
    def requests(self) -> int:
        """Requests in the trace (from the footers, as the pass counted them)."""
        return int(self._stream.requests)

    def busiest(self, size: int) -> tuple[int, int]:
        """The busiest window of ``size`` consecutive requests, found in one pass (kept)."""
        if size not in self._windows:
            start, stop, first, t_start, t_last = _busiest_pass(self._stream, size)
            self._times.update({0: first, start: t_start, stop - 1: t_last})
            self._windows[size] = (start, stop)
        return self._windows[size]

    def arrival_at(self, row: int) -> float:
        """Arrival time of a row the windows found (the first, a window's ends), s."""
        if row not in self._times:
            got = stream_rows(self._stream.select(("arrival_s",)), row, row + 1)
            self._times[row] = float(got.column_np("arrival_s")[0])
        return self._times[row]

    def longest(self) -> tuple[int, int]:
        """The longest request (prompt + output) and the longest prompt, tokens."""
        return self._longest
