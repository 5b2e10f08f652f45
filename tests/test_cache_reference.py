"""The slow reference simulators (literal replays of the definitions) and hand-checked cases.

Other cache tests import these to check the fast engine against them.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.cache.reuse import ReuseTimes, reuse_times
from kvadvisor.cache.routing import RoutingComparison, compare_routing
from kvadvisor.trace.arrays import BlockArrays, RequestArrays
from kvadvisor.trace.model import Trace
from kvadvisor.trace.schema import build_trace


def make_trace(
    hashes: Sequence[Sequence[int]],
    input_tokens: Sequence[int],
    block_tokens: int,
    arrival_s: Sequence[float] | None = None,
    session_id: Sequence[str | None] | None = None,
) -> Trace:
    """A canonical Trace built in code."""
    n = len(hashes)
    cols: dict[str, pa.Array] = {
        "arrival_s": pa.array(
            list(arrival_s) if arrival_s is not None else [float(i) for i in range(n)],
            pa.float64(),
        ),
        "input_tokens": pa.array(list(input_tokens), pa.int64()),
        "output_tokens": pa.array([1] * n, pa.int64()),
        "block_hashes": pa.array([list(h) for h in hashes], pa.list_(pa.int64())),
    }
    if session_id is not None:
        cols["session_id"] = pa.array(list(session_id), pa.string())
    return build_trace(
        pa.table(cols), path="<test>", source_format="test", block_tokens=block_tokens
    )


def reference_hits(
    hashes: Sequence[Sequence[int]],
    input_tokens: Sequence[int],
    block_tokens: int,
    capacity_blocks: float,
) -> list[int]:
    """DESIGN.md's prefix hit, replayed literally with an ordered-dict LRU of whole blocks.

    Requests in order; hit = leading run of blocks present at arrival; hit tokens =
    min(hit blocks × block_tokens, input tokens); then insert or refresh every block in order,
    evicting the least recently used while over capacity.
    """
    cache: OrderedDict[int, None] = OrderedDict()
    out = []
    for blocks, inp in zip(hashes, input_tokens, strict=True):
        k = 0
        for h in blocks:
            if h not in cache:
                break
            k += 1
        out.append(min(k * block_tokens, int(inp)))
        for h in blocks:
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
                while len(cache) > capacity_blocks:
                    cache.popitem(last=False)
    return out


def reference_ttl(
    hashes: Sequence[Sequence[int]],
    input_tokens: Sequence[int],
    block_tokens: int,
    arrival_s: Sequence[float],
    ttl_s: float,
    with_peak: bool = True,
) -> tuple[list[int], int]:
    """A cache keeping each block ``ttl_s`` after its last use: per-request hit tokens, peak blocks.

    The peak (most blocks held after any arrival) costs O(requests × blocks); skip it on
    large traces with ``with_peak=False`` (it is then 0).
    """
    last: dict[int, float] = {}
    out = []
    peak = 0
    for blocks, inp, now in zip(hashes, input_tokens, arrival_s, strict=True):
        k = 0
        for h in blocks:
            if h not in last or now - last[h] > ttl_s:
                break
            k += 1
        out.append(min(k * block_tokens, int(inp)))
        for h in blocks:
            last[h] = now
        if with_peak:
            peak = max(peak, sum(1 for t in last.values() if now - t <= ttl_s))
    return out, peak


def test_reference_by_hand() -> None:
    """A, then A B, then B A with capacity 1 block and 2 blocks, checked by hand."""
    hashes = [[1], [1, 2], [2, 1], [1, 2]]
    inp = [10, 20, 20, 15]
    # capacity 1: [1] miss; [1,2]: 1 hit then cache {2}; [2,1]: 2 hit, cache {1}; [1,2]: 1 hit
    assert reference_hits(hashes, inp, 10, 1) == [0, 10, 10, 10]
    # capacity 2: [1,2] hit 1; [2,1] both; [1,2] both, capped at 15 input tokens
    assert reference_hits(hashes, inp, 10, 2) == [0, 10, 20, 15]
    assert reference_hits(hashes, inp, 10, 0) == [0, 0, 0, 0]


def test_reference_ttl_by_hand() -> None:
    """Block 1 used at 0, 5 and 20: with a 10 s TTL the second use hits, the third does not."""
    hits, peak = reference_ttl([[1], [1, 2], [1]], [4, 8, 4], 4, [0.0, 5.0, 20.0], 10.0)
    assert hits == [0, 4, 0]
    assert peak == 2


def hit_ratio(hits: Sequence[int], input_tokens: Sequence[int]) -> float:
    """Σ hits / Σ input tokens."""
    total = sum(int(x) for x in input_tokens)
    return sum(hits) / total if total else math.nan


def as_lists(trace: Trace) -> tuple[list[list[int]], list[int]]:
    """A trace's hashes and input tokens as plain lists."""
    offsets, values = trace.hash_arrays()
    hashes = [values[offsets[i] : offsets[i + 1]].tolist() for i in range(trace.requests)]
    return hashes, np.asarray(trace.column_np("input_tokens")).tolist()


def routed(trace: Trace, **kwargs: Any) -> RoutingComparison:
    """compare_routing on the arrays the pipeline takes from ``trace`` (hashes and sessions)."""
    arrays = RequestArrays.of(trace)
    assert arrays.blocks is not None
    return compare_routing(arrays.blocks, arrays.input_tokens, sessions=arrays.sessions, **kwargs)


def reused(trace: Trace, result: PrefixCacheResult, **kwargs: Any) -> ReuseTimes:
    """reuse_times on the arrays the pipeline takes from ``trace``."""
    return reuse_times(BlockArrays.of(trace), trace.column_np("arrival_s"), result, **kwargs)
