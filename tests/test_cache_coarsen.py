"""Coarsening fine hashes to engine chunks, and why refining is refused."""

from __future__ import annotations

import numpy as np
import pytest
from test_cache_reference import as_lists, make_trace, reference_hits

from kvadvisor.cache import simulate_prefix_cache
from kvadvisor.cache.coarsen import coarsen_trace
from kvadvisor.errors import ConfigError

# 4-token fine blocks, prefix-chained (each id names its prefix); 8-token chunks = 2 blocks.
FINE = [[10, 11, 12, 13, 14], [10, 11, 12, 20], [10, 11], [10, 11, 12, 13, 14]]
INPUT = [18, 16, 7, 20]


def test_chunk_hash_is_last_fine_hash() -> None:
    """A chunk takes the hash of its last fine block; partial chunks are dropped by default."""
    coarse = coarsen_trace(make_trace(FINE, INPUT, 4), 8)
    hashes, _ = as_lists(coarse)
    # full chunks only: 18 tokens -> 2 chunks; 16 -> 2; 7 -> 0 (7 < 8); 20 -> 2
    assert hashes == [[11, 13], [11, 20], [], [11, 13]]
    assert coarse.block_tokens == 8
    assert any("coarsened from 4- to 8-token" in n for n in coarse.notes)


def test_save_unfull_chunk_keeps_the_tail() -> None:
    """With save_unfull_chunk the partial tail is a chunk of its own."""
    coarse = coarsen_trace(make_trace(FINE, INPUT, 4), 8, save_unfull_chunk=True)
    hashes, _ = as_lists(coarse)
    # the tail chunk takes the request's last fine hash
    assert hashes == [[11, 13, 14], [11, 20], [11], [11, 13, 14]]


def test_coarse_curve_equals_replay_of_chunks() -> None:
    """The curve of the coarsened trace equals the replay of its chunk hashes."""
    coarse = coarsen_trace(make_trace(FINE, INPUT, 4), 8, save_unfull_chunk=True)
    hashes, inp = as_lists(coarse)
    res = simulate_prefix_cache(coarse, warmup_fraction=0.0)
    for cap in (0, 1, 2, 3, 10):
        np.testing.assert_array_equal(
            res.hit_tokens_at(cap * 8), reference_hits(hashes, inp, 8, cap)
        )
    # last request: chunks 11, 13, 14 all seen -> hit = min(3 × 8, 20) = 20
    assert res.hit_tokens[-1] == 20


def test_refining_is_refused() -> None:
    """Chunks finer than, or not a multiple of, the trace's blocks are refused clearly."""
    trace = make_trace(FINE, INPUT, 4)
    with pytest.raises(ConfigError, match="cannot refine"):
        coarsen_trace(trace, 2)
    with pytest.raises(ConfigError, match="not a multiple"):
        coarsen_trace(trace, 6)


def test_mooncake_coarser_chunks_never_hit_more(mooncake_path) -> None:
    """Coarser chunks can only lose hit tokens (a chunk hits only when all its blocks do)."""
    from kvadvisor.trace import read_trace

    trace = read_trace(mooncake_path)
    fine = simulate_prefix_cache(trace).hit_tokens
    coarse = simulate_prefix_cache(coarsen_trace(trace, 1024, save_unfull_chunk=True)).hit_tokens
    assert np.all(coarse <= fine) and coarse.sum() < fine.sum()
