"""A streamed trace's per-request columns in chunks with context rows, for the stage profiler.

Chunks of ``rows`` consecutive requests are read one after another; each is handed with the
``context`` requests before and after it (their decodes overlap its own), so at most two
chunks' columns are held at once whatever the trace's size.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from kvadvisor.metrics import trace_hit_tokens
from kvadvisor.sections.chunkprofile import ProfileChunk
from kvadvisor.sections.profile import ProfileInputs
from kvadvisor.trace.model import Trace
from kvadvisor.trace.stream import TraceStream


def _blocks(stream: TraceStream, rows: int) -> Iterator[pa.Table]:
    """The stream as tables of ``rows`` rows (the last may have fewer)."""
    parts: list[pa.RecordBatch] = []
    held = 0
    for batch in stream:
        parts.append(batch)
        held += batch.num_rows
        while held >= rows:
            table = pa.Table.from_batches(parts)
            yield table.slice(0, rows).combine_chunks()
            rest = table.slice(rows)
            parts = rest.to_batches()
            held = rest.num_rows
    if held:
        yield pa.Table.from_batches(parts).combine_chunks()


def profile_chunks_of(
    stream: TraceStream,
    rows: int,
    context: int,
    models: tuple[str, ...],
    hits: np.ndarray | None,
) -> Iterator[ProfileChunk]:
    """``stream`` (narrowed to the profiler's columns) as chunks of ``rows`` requests.

    ``hits``: the whole trace's prefix hit tokens from the exact pass (None: read each chunk's
    ``cached_tokens``, when the trace has them).
    """

    def trace_of(table: pa.Table) -> Trace:
        return Trace(
            table=table,
            block_tokens=stream.block_tokens,
            source_format=stream.source_format,
            source_path=stream.path,
            arrivals_measured=stream.arrivals_measured,
        )

    blocks = _blocks(stream, rows)
    cur = next(blocks, None)
    behind: pa.Table | None = None
    first_row = 0
    while cur is not None:
        nxt = next(blocks, None)
        parts = [
            t
            for t in (behind, cur, None if nxt is None else nxt.slice(0, context))
            if t is not None
        ]
        table = pa.concat_tables(parts).combine_chunks()
        lead = 0 if behind is None else behind.num_rows
        trace = trace_of(table)
        if hits is not None:
            chunk_hits = np.asarray(hits[first_row - lead : first_row - lead + table.num_rows])
        else:
            chunk_hits = trace_hit_tokens(trace)
        arrival = table.column("arrival_s")
        end_s = np.inf if nxt is None else float(nxt.column("arrival_s")[0].as_py())
        yield ProfileChunk(
            inputs=ProfileInputs.of(trace, models=models),
            hits=chunk_hits,
            core=slice(lead, lead + cur.num_rows),
            core_s=(float(arrival[lead].as_py()), end_s),
        )
        behind = cur.slice(max(cur.num_rows - context, 0))
        first_row += cur.num_rows
        cur = nxt
