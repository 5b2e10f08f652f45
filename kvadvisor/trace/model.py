"""The canonical trace: one row per request, as a pyarrow table plus metadata."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute  # makes pa.compute available

from kvadvisor.errors import ConfigError
from kvadvisor.units.format import duration, plural

if TYPE_CHECKING:  # pandas loads when a DataFrame is asked for
    import pandas as pd

# name -> (arrow type, required). Units are in the names or in DESIGN.md's schema table.
CANONICAL_COLUMNS: dict[str, tuple[pa.DataType, bool]] = {
    "arrival_s": (pa.float64(), True),
    "input_tokens": (pa.int64(), True),
    "output_tokens": (pa.int64(), True),
    "request_id": (pa.string(), False),
    "session_id": (pa.string(), False),
    "parent_id": (pa.string(), False),
    "model": (pa.string(), False),
    "block_hashes": (pa.list_(pa.int64()), False),
    "cached_tokens": (pa.int64(), False),
    "ttft_s": (pa.float64(), False),
    "e2e_s": (pa.float64(), False),
    "queue_s": (pa.float64(), False),
    "tpot_s": (pa.float64(), False),
    "ok": (pa.bool_(), False),
}
REQUIRED_COLUMNS = tuple(name for name, (_, req) in CANONICAL_COLUMNS.items() if req)

# Parquet schema-metadata keys written by `convert` (so reading the output gives the same Trace).
META_BLOCK_TOKENS = b"kvadvisor.block_tokens"
META_SOURCE_FORMAT = b"kvadvisor.source_format"
META_NOTES = b"kvadvisor.notes"  # JSON list of str
META_DROPPED = b"kvadvisor.dropped"  # JSON object: reason -> rows
META_ARRIVALS_MEASURED = b"kvadvisor.arrivals_measured"  # b"true" | b"false"


def has_values(table: pa.Table, column: str) -> bool:
    """Whether ``table`` has ``column`` with at least one non-null value.

    One index lookup: ``column_names`` builds a list of every name, which per call made a
    scan over a 20,000-column CSV quadratic.
    """
    index = table.schema.get_field_index(column)
    return index >= 0 and table.column(index).null_count < table.num_rows


@dataclass(frozen=True, repr=False)
class Trace:
    """A validated request trace in canonical form.

    ``table`` holds only canonical columns with canonical types, sorted by ``arrival_s``
    (stable), arrivals starting at 0. ``dropped`` counts rows removed while reading, by
    reason code; ``notes`` says what was changed (sorted, shifted, ...), never silently.
    ``arrivals_measured`` is False when the source has no arrival times (benchmark results
    without start times): ``arrival_s`` is then a placeholder, not a measurement.
    """

    table: pa.Table
    block_tokens: int | None
    source_format: str
    source_path: str
    dropped: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    arrivals_measured: bool = True

    @property
    def requests(self) -> int:
        """Number of requests (rows)."""
        return self.table.num_rows

    @property
    def columns(self) -> tuple[str, ...]:
        """Canonical columns present."""
        return tuple(self.table.column_names)

    def has(self, column: str) -> bool:
        """Whether the trace carries ``column`` with at least one non-null value."""
        return has_values(self.table, column)

    @property
    def has_hashes(self) -> bool:
        """Whether prefix block hashes are present (prefix reuse can be measured)."""
        return self.has("block_hashes") and self.block_tokens is not None

    @property
    def duration_s(self) -> float:
        """Time from first to last arrival, seconds."""
        if self.requests == 0:
            return 0.0
        arr = self.column_np("arrival_s")
        return float(arr[-1] - arr[0])

    @property
    def failed_requests(self) -> int:
        """Requests with ok == false (0 when the trace has no ``ok`` column)."""
        if "ok" not in self.table.column_names:
            return 0
        return int(pa.compute.sum(pa.compute.invert(self.table["ok"])).as_py() or 0)

    @property
    def arrival_rate_per_s(self) -> float | None:
        """Mean arrival rate, requests / duration_s; None when unmeasured or the span is 0."""
        duration = self.duration_s
        if not self.arrivals_measured or duration <= 0:
            return None
        return self.requests / duration

    def to_pandas(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The trace as a DataFrame, one row per request in arrival order.

        The canonical columns it has (``arrival_s``, ``input_tokens``, ``output_tokens``, ...;
        docs/traces.md), or ``columns`` of them; ``block_hashes`` holds one array per request.
        An unknown column is a ValueError naming the ones there are.
        """
        table = self.table
        if columns is not None:
            unknown = [c for c in columns if c not in table.column_names]
            if unknown:
                raise ConfigError(
                    f"the trace has no column {', '.join(map(repr, unknown))}; it has: "
                    f"{', '.join(table.column_names)}"
                )
            table = table.select(list(columns))
        return table.to_pandas()

    def __repr__(self) -> str:
        """One line: where it came from, its size and span, its columns (not the table)."""
        where = self.source_path or "memory"
        blocks = f", {self.block_tokens} tokens per block" if self.block_tokens else ""
        return (
            f"<kvadvisor.Trace {where} ({self.source_format}): "
            f"{plural(self.requests, 'request')} over {duration(self.duration_s)}{blocks}; "
            f"columns {', '.join(self.columns)}>"
        )

    def column_np(self, name: str) -> np.ndarray:
        """A column as a numpy array (nulls become NaN for floats)."""
        return self.table[name].to_numpy(zero_copy_only=False)

    def hash_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Block hashes flattened: (offsets int64 of length requests+1, values int64).

        Request i owns ``values[offsets[i]:offsets[i+1]]``. Null lists count as empty.
        """
        chunked = self.table["block_hashes"]
        # One chunk is used as it is: combine_chunks would copy it (115 MB and up to 0.25 s
        # on 14M hashes, on every call).
        col = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
        if col.null_count:
            col = pa.compute.fill_null(col, pa.scalar([], col.type))
        offsets = col.offsets.to_numpy().astype(np.int64, copy=False)
        values = col.values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        base = offsets[0]
        return offsets - base, values[base : offsets[-1]]
