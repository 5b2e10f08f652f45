"""Per-instance prefix caches under a routing policy, against one pooled cache."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum

import numpy as np

from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.cache.prefix import pass_block_ids, simulate_arrays, warmup_requests_for
from kvadvisor.errors import ConfigError
from kvadvisor.trace.arrays import BlockArrays, SessionKeys


class RoutingPolicy(str, Enum):
    """How requests are spread over serving instances."""

    RANDOM = "random"
    ROUND_ROBIN = "round_robin"
    SESSION = "session"  # session-sticky: every request of a session goes to one instance
    PREFIX_AWARE = "prefix_aware"  # one global cache: every instance sees every prefix


@dataclass(frozen=True)
class RoutingPoint:
    """Token hit ratio at one per-instance capacity (None = unbounded)."""

    capacity_tokens_per_instance: int | None
    hit_ratio_all: float | None
    hit_ratio_steady: float | None


@dataclass(frozen=True)
class RoutingOutcome:
    """One policy's curve at the compared capacities, or why it could not be evaluated."""

    policy: RoutingPolicy
    points: tuple[RoutingPoint, ...]
    unavailable: str | None = None


@dataclass(frozen=True)
class RoutingComparison:
    """Local caches (one per instance, each ``capacity`` big) against a pool of N × capacity."""

    instances: int
    seed: int
    outcomes: tuple[RoutingOutcome, ...]


def _instance_rows(inst: np.ndarray) -> list[np.ndarray]:
    """The request rows of each instance that got any, in instance order (rows ascending).

    One stable sort instead of a scan per instance: the cost does not grow with the number of
    instances, only with the requests.
    """
    order = np.argsort(inst, kind="stable")
    _, starts = np.unique(inst[order], return_index=True)
    return np.split(order, starts[1:]) if order.size else []


def _session_hashes(sessions: SessionKeys, seed: int, first_row: int = 0) -> np.ndarray:
    """A 64-bit hash per request of its session name, keyed by ``seed``.

    A request without a session is its own session: it is keyed by its row number (counted
    from ``first_row``, the trace's row of ``sessions``' first request). Each
    name is hashed once (pandas hashes each value on its own, so hashing the names and
    indexing them by code gives every row the hash of its own name).
    """
    import pandas as pd  # only this policy hashes strings; keep pandas off the import path

    key = f"{seed:016d}"  # exact: the hash key pandas reads
    h = pd.util.hash_array(sessions.names, hash_key=key)[np.maximum(sessions.codes, 0)]
    missing = np.flatnonzero(sessions.codes < 0)
    if missing.size:
        # Only those rows are formatted; formatting every row cost a Python call per request.
        rows = np.array([f"#row{first_row + i}" for i in missing], dtype=object)
        h[missing] = pd.util.hash_array(rows, hash_key=key)
    return h


def session_instances(
    sessions: SessionKeys, instances: int, seed: int = 0, first_row: int = 0
) -> np.ndarray:
    """Session-sticky routing of requests from the trace's row ``first_row`` on (a batch)."""
    return (_session_hashes(sessions, seed, first_row) % np.uint64(instances)).astype(np.int64)


def assign_instances(
    policy: RoutingPolicy,
    requests: int,
    instances: int,
    seed: int = 0,
    sessions: SessionKeys | None = None,
) -> np.ndarray | None:
    """Instance index per request for a local-cache policy (None: the trace has no sessions)."""
    n = requests
    if policy is RoutingPolicy.RANDOM:
        return np.random.default_rng(seed).integers(0, instances, n)
    if policy is RoutingPolicy.ROUND_ROBIN:
        return np.arange(n, dtype=np.int64) % instances
    if policy is RoutingPolicy.SESSION:
        if sessions is None:
            return None
        return session_instances(sessions, instances, seed)
    raise ConfigError(f"routing policy '{policy.value}' does not split the cache")


# Positions are int32 in the last-position array (shared by a worker's instances, one after
# another): past this the array is cleared and they start again.
POSITION_LIMIT = 2**31 - 1


def _local_hits(
    offsets: np.ndarray,
    values: np.ndarray,
    pooled: PrefixCacheResult | None,
    local: list[list[np.ndarray]],
    inp: np.ndarray,
    block_tokens: int,
    warmup: int,
    caps_blocks: np.ndarray,
) -> np.ndarray:
    """Per local policy, its instances' hit tokens binned at ``caps_blocks``.

    ``local`` holds each policy's instances' rows. Returns int64 (policies, 2, caps + 1):
    row 0 over all requests, row 1 steady state (see ``stackdist.instance_hits``). Every
    instance replays its own requests through its own cache in one compiled call (its hashes
    are not copied out); the caches are independent and the kernel releases the GIL, so they
    run on every core, each worker with one id-indexed scratch array its instances share.
    Integer sums: the order does not change them.
    """
    from kvadvisor.cache import stackdist  # numba only when a curve is computed

    # One set of ids for every instance: the pooled pass's when given (no remap, no copy).
    ids, bound = pass_block_ids(pooled, values)
    jobs = [(k, rows) for k, subsets in enumerate(local) for rows in subsets]
    sizes = np.diff(offsets)
    words = max((int(sizes[rows].sum()) for _, rows in jobs), default=0) // 64 + 1
    workers = max(min(os.cpu_count() or 1, len(jobs)), 1)
    b, w = np.int64(block_tokens), np.int64(warmup)

    def work(worker: int) -> np.ndarray:
        out = np.zeros((len(local), 2, caps_blocks.shape[0] + 1), np.int64)
        last_pos = np.zeros(max(bound, 1), np.int32)
        bits = np.empty(words, np.uint64)
        tree = np.empty(words + 1, np.int32)
        base = 0
        for k, rows in jobs[worker::workers]:
            accesses = int(sizes[rows].sum())
            if base + accesses >= POSITION_LIMIT:
                last_pos[:] = 0
                base = 0
            stackdist.instance_hits(
                offsets,
                ids,
                rows,
                inp,
                b,
                w,
                caps_blocks,
                np.int64(base),
                last_pos,
                bits,
                tree,
                out[k],
            )
            # The next instance's positions start past this one's: no clearing between them.
            base += accesses
        return out

    with ThreadPoolExecutor(max_workers=workers) as ex:
        return sum(ex.map(work, range(workers)))


def compare_routing(
    blocks: BlockArrays,
    input_tokens: np.ndarray,
    *,
    sessions: SessionKeys | None = None,
    instances: int,
    capacities_tokens: Sequence[int | None],
    policies: Sequence[RoutingPolicy] = tuple(RoutingPolicy),
    warmup_fraction: float = 0.5,
    seed: int = 0,
    pooled: PrefixCacheResult | None = None,
) -> RoutingComparison:
    """Hit ratio of N local LRU caches under each policy, and of the pooled cache.

    A local policy routes each request to one instance; each instance replays its own requests
    through its own cache of C tokens (the same prefix rule), and the hit tokens of all
    instances are summed. The pooled cache (prefix-aware routing, or Mooncake's global KV pool)
    is one LRU cache of N × C tokens that every request reads. Steady state is the same set of
    requests as for the whole trace (global index past the warm-up). ``pooled`` is the exact
    pass over these same hashes and warm-up when the caller already has it (not run again).
    ``sessions`` are the requests' sessions, for session-sticky routing (None: the trace has
    none, and that policy is unavailable).
    """
    block_tokens = blocks.block_tokens
    if instances < 1:
        raise ConfigError(f"instances must be at least 1, got {instances}")
    inp = np.asarray(input_tokens).astype(np.int64)
    warmup = warmup_requests_for(inp.shape[0], warmup_fraction)
    offsets, values = blocks.offsets, blocks.values
    total_all = float(inp.sum())
    total_steady = float(inp[warmup:].sum())
    caps = np.asarray([np.inf if c is None else c for c in capacities_tokens], np.float64)
    # Local caches are binned at the finite capacities only, in whole blocks as the curve reads
    # them; the hits at cap j are the bins up to its place among them (all bins: unbounded).
    # No trace has 2^62 blocks: a larger finite capacity holds everything, as unbounded does.
    cap_blocks = np.minimum(np.floor(caps / block_tokens), 2.0**62)
    finite = np.isfinite(cap_blocks)
    steps = np.unique(cap_blocks[finite]).astype(np.int64)
    place = np.full(caps.shape[0], steps.shape[0])
    place[finite] = np.searchsorted(steps, cap_blocks[finite])
    hits_of: dict[RoutingPolicy, np.ndarray] = {}
    unavailable: dict[RoutingPolicy, str] = {}
    local: dict[RoutingPolicy, list[np.ndarray]] = {}
    for policy in policies:
        if policy is RoutingPolicy.PREFIX_AWARE:
            res = (
                pooled
                if pooled is not None and pooled.exact
                else simulate_arrays(
                    offsets,
                    values,
                    inp,
                    block_tokens,
                    warmup_requests=warmup,
                    warmup_fraction=warmup_fraction,
                )
            )
            hits_of[policy] = res.curve.hit_tokens_at(caps * instances)
            continue
        inst = assign_instances(policy, inp.shape[0], instances, seed, sessions)
        if inst is None:
            unavailable[policy] = "the trace has no session_id column"
        else:
            local[policy] = _instance_rows(inst)
    if local:
        binned = _local_hits(
            offsets, values, pooled, list(local.values()), inp, block_tokens, warmup, steps
        )
        for policy, bins in zip(local, binned, strict=True):
            hits_of[policy] = np.cumsum(bins, axis=1)[:, place].astype(np.float64)
    outcomes = []
    for policy in policies:
        if policy in unavailable:
            outcomes.append(RoutingOutcome(policy, (), unavailable=unavailable[policy]))
            continue
        hits = hits_of[policy]
        points = tuple(
            RoutingPoint(
                capacities_tokens[j],
                hits[0, j] / total_all if total_all > 0 else None,
                hits[1, j] / total_steady if total_steady > 0 else None,
            )
            for j in range(caps.shape[0])
        )
        outcomes.append(RoutingOutcome(policy, points))
    return RoutingComparison(instances=instances, seed=seed, outcomes=tuple(outcomes))
