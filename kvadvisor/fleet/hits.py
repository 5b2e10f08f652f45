"""Prefix hits per tier from the exact cache engine: one LRU pass per replica, instance or pool.

Which tier serves a request's prefix does not depend on timing: DESIGN.md's prefix hit looks
the request up at arrival, in arrival order, then inserts its blocks. So once requests are
routed, each scope unit (a replica, an instance, the pool) replays its own stream through
``cache.simulate_arrays`` once, and every tier capacity is read off that pass
(``PrefixCacheResult.hit_tokens_at``). Replaying another deployment with the same routing
reuses the passes (:class:`ReplayContext`).
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from kvadvisor.cache import PrefixCacheResult
from kvadvisor.cache.prefix import pass_block_ids, simulate_arrays
from kvadvisor.errors import TraceError
from kvadvisor.trace.arrays import BlockArrays, RequestArrays
from kvadvisor.trace.model import Trace


@dataclass(frozen=True, eq=False)
class TraceArrays:
    """The pipeline's request arrays made ready for the replay, in arrival order.

    ``arrays`` is the one request-array type (:class:`~kvadvisor.trace.arrays.RequestArrays`)
    with arrivals from 0 s (float64), token counts below 1 read as 1 (a request always prefills
    and produces at least one token; ``clamped`` counts such requests) and its block hashes
    replaced by dense ids below ``id_bound`` (int32; None without hashes). The replay reads it
    through the properties below; nothing here copies a column of its own.
    """

    arrays: RequestArrays
    id_bound: int = 0
    clamped: int = 0

    @property
    def arrival_s(self) -> np.ndarray:
        """Arrival times from the first request's, s."""
        return self.arrays.arrival_s

    @property
    def input_tokens(self) -> np.ndarray:
        """Prompt lengths, tokens (at least 1)."""
        return self.arrays.input_tokens

    @property
    def output_tokens(self) -> np.ndarray:
        """Output lengths, tokens (at least 1)."""
        return self.arrays.output_tokens

    @property
    def block_tokens(self) -> int | None:
        """Tokens per block (None without hashes)."""
        return None if self.arrays.blocks is None else self.arrays.blocks.block_tokens

    @property
    def offsets(self) -> np.ndarray | None:
        """Request i's block ids are ``block_ids[offsets[i]:offsets[i+1]]`` (None: no hashes)."""
        return None if self.arrays.blocks is None else self.arrays.blocks.offsets

    @property
    def block_ids(self) -> np.ndarray | None:
        """The block hashes as dense ids (None without hashes)."""
        return None if self.arrays.blocks is None else self.arrays.blocks.values

    @property
    def requests(self) -> int:
        """Requests in the trace."""
        return self.arrays.requests

    @property
    def has_hashes(self) -> bool:
        """Whether prefix hits can be measured."""
        return self.arrays.blocks is not None

    def take(self, rows: np.ndarray) -> TraceArrays:
        """Requests ``rows`` (ascending) only, their block ids with them (same dense ids)."""
        a, b = self.arrays, self.arrays.blocks
        blocks = None
        if b is not None:
            offsets, ids = gather_blocks(b.offsets, b.values, rows)
            blocks = BlockArrays(offsets, ids, b.block_tokens)
        taken = RequestArrays(
            a.arrival_s[rows], a.input_tokens[rows], a.output_tokens[rows], blocks
        )
        return replace(self, arrays=taken)

    def with_arrivals(self, arrival_s: np.ndarray) -> TraceArrays:
        """The same requests arriving at other times (float64 seconds)."""
        arrays = replace(self.arrays, arrival_s=np.asarray(arrival_s, dtype=np.float64))
        return replace(self, arrays=arrays)

    @classmethod
    def of(
        cls,
        arrival_s: np.ndarray,
        input_tokens: np.ndarray,
        output_tokens: np.ndarray,
        *,
        offsets: np.ndarray | None = None,
        hashes: np.ndarray | None = None,
        block_tokens: int | None = None,
    ) -> TraceArrays:
        """Arrays from plain columns (hashes of any integer values, remapped to dense ids)."""
        blocks = None
        if hashes is not None and offsets is not None and block_tokens:
            blocks = BlockArrays(
                np.asarray(offsets, dtype=np.int64),
                np.asarray(hashes, dtype=np.int64),
                int(block_tokens),
            )
        return cls.from_arrays(RequestArrays(arrival_s, input_tokens, output_tokens, blocks))

    @classmethod
    def from_arrays(
        cls, arrays: RequestArrays, pass_result: PrefixCacheResult | None = None
    ) -> TraceArrays:
        """The replay's arrays from the request arrays the pipeline took from the trace once.

        The hashes become dense ids: those the exact prefix-cache pass ``pass_result`` over
        the same hashes used (not remapped again), else found here.
        """
        a = np.ascontiguousarray(arrays.arrival_s, dtype=np.float64)
        if a.size and (not np.all(np.isfinite(a)) or np.any(np.diff(a) < 0)):
            raise TraceError("replay: arrival times must be finite and in ascending order")
        i = np.asarray(arrays.input_tokens, dtype=np.int64)
        o = np.asarray(arrays.output_tokens, dtype=np.int64)
        clamped = int(np.count_nonzero((i < 1) | (o < 1)))
        b = arrays.blocks
        blocks, bound = None, 0
        if b is not None:
            ids, bound = pass_block_ids(pass_result, b.values)
            offsets = np.ascontiguousarray(b.offsets, dtype=np.int64)
            blocks = BlockArrays(offsets, ids.astype(np.int32, copy=False), b.block_tokens)
        ready = RequestArrays(
            a - (a[0] if a.size else 0.0), np.maximum(i, 1), np.maximum(o, 1), blocks
        )
        return cls(ready, id_bound=int(bound), clamped=clamped)

    @classmethod
    def from_trace(cls, trace: Trace) -> TraceArrays:
        """The arrays of a canonical trace (its hashes when it has them)."""
        return cls.from_arrays(RequestArrays.of(trace))


def gather_blocks(
    offsets: np.ndarray, ids: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The block ids of requests ``rows`` (ascending), with their own offsets (vectorised)."""
    counts = np.diff(offsets)[rows]
    sub_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    take = np.repeat(offsets[rows] - sub_offsets[:-1], counts) + np.arange(
        int(sub_offsets[-1]), dtype=np.int64
    )
    return sub_offsets, ids[take]


class HitIndex:
    """Exact LRU passes of every scope unit's request stream, read at any capacity.

    ``units[i]`` is the unit (replica, instance or 0 for a pool) of request ``rows[i]``.
    """

    def __init__(self, arrays: TraceArrays, rows: np.ndarray, units: np.ndarray) -> None:
        if not arrays.has_hashes:
            raise TraceError("replay: prefix hits need block hashes")
        assert arrays.offsets is not None and arrays.block_ids is not None
        self.requests = arrays.requests
        self.rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(units, kind="stable")
        units_sorted = np.asarray(units)[order]
        cuts = np.flatnonzero(np.diff(units_sorted)) + 1
        self.members = [self.rows[part] for part in np.split(order, cuts) if part.size]
        self.members = [np.sort(m) for m in self.members]
        offsets, ids, bound = arrays.offsets, arrays.block_ids, arrays.id_bound
        inp, bt = arrays.input_tokens, int(arrays.block_tokens or 1)

        def one(members: np.ndarray) -> PrefixCacheResult:
            sub_offsets, sub_ids = gather_blocks(offsets, ids, members)
            return simulate_arrays(
                sub_offsets,
                sub_ids,  # a fresh copy: the pass overwrites it with distances
                inp[members],
                bt,
                warmup_requests=0,
                warmup_fraction=0.0,
                id_bound=bound,
            )

        # Units are independent and the kernels release the GIL: run them on every core.
        workers = min(os.cpu_count() or 1, max(len(self.members), 1))
        with ThreadPoolExecutor(max_workers=workers) as ex:
            self.results = list(ex.map(one, self.members))

    def hit_tokens(self, capacity_tokens: float | None) -> np.ndarray:
        """Per request of the whole trace (0 outside ``rows``), hit tokens at a capacity."""
        out = np.zeros(self.requests, np.int64)
        for members, res in zip(self.members, self.results, strict=True):
            out[members] = res.hit_tokens_at(capacity_tokens)
        return out


class ReplayContext:
    """A trace prepared for many replays: its arrays and the LRU passes already run.

    Replaying candidate deployments of one trace (the advisor's search) pays for each
    routing's passes once: they are keyed by the stage's request rows and scope units.
    """

    def __init__(self, arrays: TraceArrays) -> None:
        self.arrays = arrays
        self._indexes: dict[str, HitIndex] = {}

    def with_arrivals(self, arrival_s: np.ndarray) -> ReplayContext:
        """The same requests arriving at other times (a traffic scale), sharing the passes.

        Which tier serves a hit depends on the order of requests, not on their times.
        """
        ctx = ReplayContext(self.arrays.with_arrivals(arrival_s))
        ctx._indexes = self._indexes
        return ctx

    def hit_index(self, rows: np.ndarray, units: np.ndarray) -> HitIndex:
        """The passes for requests ``rows`` split into ``units`` (cached)."""
        digest = hashlib.blake2b(digest_size=16)
        digest.update(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
        digest.update(np.ascontiguousarray(units, dtype=np.int64).tobytes())
        key = digest.hexdigest()
        if key not in self._indexes:
            self._indexes[key] = HitIndex(self.arrays, rows, units)
        return self._indexes[key]
