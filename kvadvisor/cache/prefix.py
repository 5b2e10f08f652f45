"""Exact prefix-cache hit ratio at every LRU capacity in one pass (DESIGN.md's prefix hit)."""

from __future__ import annotations

import math

import numpy as np

from kvadvisor.cache.model import MissRatioCurve, PrefixCacheResult
from kvadvisor.errors import ConfigError

# The kernel stores positions and distances as int32.
MAX_EXACT_ACCESSES = 2**31 - 2


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (no copy), for a kernel argument the kernel only reads.

    numba compiles a kernel once per argument type, and writability is part of the type: a
    trace's arrays are read-only or not depending on how they were read (arrow buffers, a
    copy, a slice), so each kernel compiled once more for each mix. Handed read-only views,
    it compiles once for all of them.
    """
    view = a.view()
    view.flags.writeable = False
    return view


def warmup_requests_for(requests: int, warmup_fraction: float) -> int:
    """Requests treated as warm-up: ``floor(warmup_fraction × requests)``."""
    if not 0.0 <= warmup_fraction < 1.0:
        raise ConfigError(
            f"warmup fraction {warmup_fraction} is outside [0, 1); give e.g. 0.5 for half the trace"
        )
    return int(math.floor(warmup_fraction * requests))


def dense_id_bound(values: np.ndarray) -> int | None:
    """The id bound U when hashes are already small non-negative ids, else None.

    Small: at most 2 per access, or < 1024 (Mooncake's remapped hashes); ids lie in ``[0, U)``.
    """
    if values.shape[0] == 0:
        return 0
    return id_bound_of(int(values.min()), int(values.max()), int(values.shape[0]))


def id_bound_of(lo: int, hi: int, accesses: int) -> int | None:
    """:func:`dense_id_bound` from the hashes' least and greatest value and their count."""
    if accesses == 0:
        return 0
    if lo >= 0 and hi < max(2 * accesses, 1024) and hi < MAX_EXACT_ACCESSES:
        return hi + 1
    return None


def _remap(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Arbitrary 64-bit hashes as dense int32 ids in order of first use, through a hash map."""
    from kvadvisor.cache import stackdist  # numba only when a curve is computed

    n = int(values.shape[0])
    # Load at most 0.8 even if every key is distinct: probes stay short, 20 bytes per access.
    table = np.zeros(2 * (n + n // 4 + 1), np.int64)
    out = np.empty(n, np.int32)
    n_unique = stackdist.remap_dense(read_only(values), table, out)
    del table
    return out, int(n_unique)


def dense_block_ids(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Block hashes as dense int32 ids, plus the id bound U (ids lie in ``[0, U)``).

    Ids that are already small non-negative integers (Mooncake's remapped hashes) are used as
    they are; arbitrary 64-bit hashes go through a compiled hash map, ids in order of first use.
    """
    bound = dense_id_bound(values)
    if bound is not None:
        return values.astype(np.int32), bound
    return _remap(values)


def first_use_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hashes as dense int32 ids in order of first use, and the hash of each id.

    A run of the trace made dense on its own (a partition, on a worker): the runs' ids join
    into the whole trace's through their hashes (:func:`join_first_use`).
    """
    ids, unique = _remap(values)
    keys = np.empty(unique, np.int64)
    keys[ids] = values
    return ids, keys


def join_first_use(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, int]:
    """The runs' :func:`first_use_ids`, in trace order, as one trace's dense ids and bound.

    A hash has one id wherever it appears (the runs' own hashes made dense together), so the
    exact pass over these ids gives the distances of the hashes themselves.
    """
    if not parts:
        return np.zeros(0, np.int32), 0
    joined, bound = _remap(np.concatenate([keys for _, keys in parts]))
    ids, start = [], 0
    for local, keys in parts:
        ids.append(joined[start : start + keys.shape[0]][local])
        start += keys.shape[0]
    return np.concatenate(ids), bound


def pass_block_ids(result: PrefixCacheResult | None, values: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids (any integer dtype) of ``values``, the flattened hashes ``result`` replayed.

    The ids the exact pass used, so routing and reuse times neither remap the hashes again nor
    scan them for their bound: the remapped ids it kept, or ``values`` themselves when they are
    small ids already. Without such a result (None, sampled, or another stream's), found here.
    """
    if result is not None and result.id_bound is not None:
        if result.block_ids is not None and result.block_ids.shape[0] == values.shape[0]:
            return result.block_ids, result.id_bound
        dist = result.leading_distance
        if result.block_ids is None and dist is not None and dist.shape[0] == values.shape[0]:
            return values, result.id_bound
    bound = dense_id_bound(values)
    if bound is not None:
        return values, bound
    return _remap(values)


def simulate_arrays(
    offsets: np.ndarray,
    values: np.ndarray,
    input_tokens: np.ndarray,
    block_tokens: int,
    *,
    warmup_requests: int,
    warmup_fraction: float,
    id_bound: int | None = None,
    keep_ids: bool = False,
) -> PrefixCacheResult:
    """The exact pass over flattened block hashes (see :func:`simulate_prefix_cache`).

    ``id_bound``: ``values`` are already dense ids in ``[0, id_bound)`` (e.g. a subset of a
    trace whose ids were remapped once), so they are used as they are. ``keep_ids``: keep the
    remapped ids in the result (4 bytes per access) for :func:`pass_block_ids`.
    """
    from kvadvisor.cache import stackdist  # numba only when a curve is computed

    if values.shape[0] > MAX_EXACT_ACCESSES:
        raise ConfigError(
            f"{values.shape[0]} block accesses exceed the exact pass's limit "
            f"({MAX_EXACT_ACCESSES}); estimate the curve by sampling instead (--cache-sample-rate)"
        )
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    input_tokens = np.ascontiguousarray(input_tokens, dtype=np.int64)
    n_req = int(input_tokens.shape[0])
    n = int(values.shape[0])
    # Ids in order of first use also keep recently used blocks close together in last_pos,
    # which the kernel's random lookups benefit from (a hash table would scatter them).
    # What the result says about the ids (see pass_block_ids): the bound when the hashes are
    # the ids themselves or the remapped ids are kept, else nothing.
    kept, known_bound = None, None
    if id_bound is None:
        bound = dense_id_bound(values)
        if bound is not None:
            dist, known_bound = values.astype(np.int32), bound
        else:
            dist, bound = _remap(values)
            if keep_ids:
                # The kernel overwrites the ids with distances; this copy adds nothing to the
                # peak (the remap's table, 20 bytes per access, is gone by now).
                kept, known_bound = dist.copy(), bound
    else:
        # int32 input is overwritten in place: the result then says nothing about the ids.
        dist, bound = np.ascontiguousarray(values, dtype=np.int32), int(id_bound)
    bins = stackdist.leading_distances(offsets, dist, bound) + 1
    tok_all = np.zeros(bins, np.int64)
    tok_steady = np.zeros(bins, np.int64)
    blk_all = np.zeros(bins, np.int64)
    blk_steady = np.zeros(bins, np.int64)
    hit = stackdist.curve_bins(
        offsets,
        dist,
        read_only(input_tokens),
        np.int64(block_tokens),
        np.int64(warmup_requests),
        tok_all,
        tok_steady,
        blk_all,
        blk_steady,
    )
    steps = np.flatnonzero(blk_all)
    curve = MissRatioCurve(
        block_tokens=block_tokens,
        # a block at distance d is a hit once the cache holds d + 1 blocks
        capacity_blocks=steps.astype(np.int64) + 1,
        hit_tokens_all=np.cumsum(tok_all[steps]),
        hit_tokens_steady=np.cumsum(tok_steady[steps]),
        hit_blocks_all=np.cumsum(blk_all[steps]),
        hit_blocks_steady=np.cumsum(blk_steady[steps]),
        total_tokens_all=int(input_tokens.sum()),
        total_tokens_steady=int(input_tokens[warmup_requests:].sum()),
        total_blocks_all=n,
        total_blocks_steady=n - int(offsets[warmup_requests]) if n_req else 0,
    )
    return PrefixCacheResult(
        block_tokens=block_tokens,
        warmup_fraction=warmup_fraction,
        warmup_requests=warmup_requests,
        input_tokens=input_tokens,
        curve=curve,
        hit_tokens=hit,
        access_offsets=offsets,
        leading_distance=dist,
        id_bound=known_bound,
        block_ids=kept,
    )


def curve_grid(curve: MissRatioCurve, max_points: int = 200) -> np.ndarray:
    """Capacities in tokens at which to draw the whole curve: every step, or a log grid.

    All steps when there are at most ``max_points``; otherwise ``max_points`` capacities spaced
    evenly in log scale from the first to the last step (each the exact value there).
    """
    steps = curve.capacity_blocks
    if steps.shape[0] == 0:
        return np.zeros(0, np.int64)
    if steps.shape[0] <= max_points:
        blocks = steps
    else:
        blocks = np.unique(np.round(np.geomspace(steps[0], steps[-1], max_points)).astype(np.int64))
    return blocks * curve.block_tokens
