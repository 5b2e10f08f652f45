"""The per-request arrays every analysis reads, taken from a trace once and passed down."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvadvisor.errors import TraceError
from kvadvisor.trace.model import Trace


@dataclass(frozen=True, eq=False)
class BlockArrays:
    """A trace's block hashes flattened: request i owns ``values[offsets[i]:offsets[i+1]]``.

    ``offsets`` (int64, one more than the requests, from 0) and ``values`` (int64 hashes) are
    taken from the trace once (:meth:`of`), or made by regrouping them to an engine's chunk size
    (``cache.coarsen``); ``block_tokens`` is the tokens per block, positive.
    """

    offsets: np.ndarray
    values: np.ndarray
    block_tokens: int

    @property
    def accesses(self) -> int:
        """Block accesses: the hashes of every request together."""
        return int(self.values.shape[0])

    @classmethod
    def of(cls, trace: Trace) -> BlockArrays:
        """The trace's hashes; a trace without them has unknown prefix reuse (an error here)."""
        if not trace.has_hashes or trace.block_tokens is None:
            raise TraceError(
                f"{trace.source_path}: the trace has no block hashes, so prefix reuse is unknown; "
                "use a trace with block_hashes (and block_tokens) to simulate a prefix cache"
            )
        if trace.block_tokens <= 0:
            raise TraceError(
                f"{trace.source_path}: block_tokens must be positive, got {trace.block_tokens}"
            )
        offsets, values = trace.hash_arrays()
        return cls(offsets, values, int(trace.block_tokens))


@dataclass(frozen=True, eq=False)
class SessionKeys:
    """The trace's ``session_id`` as one integer per request and the names they stand for.

    ``codes[i]`` indexes ``names`` (sessions numbered in order of first appearance), -1 where
    request i has no session.
    """

    codes: np.ndarray
    names: np.ndarray

    @classmethod
    def of(cls, trace: Trace) -> SessionKeys | None:
        """The trace's sessions, or None when it has none."""
        return cls.of_column(trace.table["session_id"]) if trace.has("session_id") else None

    @classmethod
    def of_column(cls, column: pa.ChunkedArray) -> SessionKeys:
        """A ``session_id`` column encoded: each name once, one code per row."""
        encoded = pc.dictionary_encode(column).combine_chunks()
        codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
        names = encoded.dictionary.to_numpy(zero_copy_only=False).astype(object)
        return cls(codes.astype(np.int64), names)


@dataclass(frozen=True, eq=False)
class RequestArrays:
    """Arrival times (s) and prompt and output lengths (tokens), one value per request.

    With them, when the trace has them, its block hashes (``blocks``) and sessions
    (``sessions``, encoded on first use from the trace's column ``session_ids``: only session
    routing and the conversation split read them). The pipeline derives them from the trace
    once and hands the same arrays to the trace summary, the stage profiler, the cache
    simulation and its extras, the plan review and the replay, instead of each reading the
    table again.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    blocks: BlockArrays | None = None
    session_ids: pa.ChunkedArray | None = None

    @cached_property
    def sessions(self) -> SessionKeys | None:
        """The sessions, encoded once (None: the trace has none)."""
        return None if self.session_ids is None else SessionKeys.of_column(self.session_ids)

    @property
    def requests(self) -> int:
        """Requests (rows)."""
        return int(self.arrival_s.shape[0])

    @property
    def duration_s(self) -> float:
        """Time from first to last arrival, seconds (as :attr:`Trace.duration_s`)."""
        if self.requests == 0:
            return 0.0
        return float(self.arrival_s[-1] - self.arrival_s[0])

    @classmethod
    def of(cls, trace: Trace) -> RequestArrays:
        """The trace's columns as numpy arrays, in row (arrival) order, hashes and sessions too."""
        return cls(
            trace.column_np("arrival_s"),
            trace.column_np("input_tokens"),
            trace.column_np("output_tokens"),
            blocks=BlockArrays.of(trace) if trace.has_hashes else None,
            session_ids=trace.table["session_id"] if trace.has("session_id") else None,
        )
