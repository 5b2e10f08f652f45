"""The exact one-pass curve against the literal LRU replay, on the Mooncake trace and at random."""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cache_reference import as_lists, make_trace, reference_hits, reused, routed

from kvadvisor.cache import STANDARD_CAPACITIES_TOKENS, curve_grid, simulate_prefix_cache
from kvadvisor.cache.prefix import dense_block_ids, pass_block_ids, simulate_arrays
from kvadvisor.errors import ConfigError, TraceError
from kvadvisor.trace import read_trace
from kvadvisor.trace.schema import build_trace


@pytest.fixture(scope="module")
def mooncake(mooncake_path):
    """The Mooncake trace, its exact result, and its hashes as lists (computed once)."""
    trace = read_trace(mooncake_path)
    return trace, simulate_prefix_cache(trace), as_lists(trace)


# Capacities in blocks: tiny, around the knee of the Mooncake curve, and past the working set.
MOONCAKE_CAPACITIES = (0, 1, 3, 64, 2_000, 9_000, 31_000, 120_000)


@pytest.mark.parametrize("capacity_blocks", MOONCAKE_CAPACITIES)
def test_mooncake_equals_reference(mooncake, capacity_blocks: int) -> None:
    """Per-request hit tokens at C blocks equal the ordered-dict replay, request by request."""
    trace, result, (hashes, inp) = mooncake
    expected = np.asarray(reference_hits(hashes, inp, 512, capacity_blocks))
    got = result.hit_tokens_at(capacity_blocks * 512)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)
    # and the curve agrees with the per-request sums, over all and steady requests
    all_, steady = result.curve.token_hit_ratio_at(capacity_blocks * 512)
    assert all_ == pytest.approx(expected.sum() / sum(inp), abs=0, rel=1e-12)
    warm = result.warmup_requests
    assert steady == pytest.approx(expected[warm:].sum() / sum(inp[warm:]), abs=0, rel=1e-12)


def test_mooncake_unbounded(mooncake) -> None:
    """Unbounded capacity: the replay with no eviction, and the published block counts."""
    trace, result, (hashes, inp) = mooncake
    expected = np.asarray(reference_hits(hashes, inp, 512, float("inf")))
    np.testing.assert_array_equal(result.hit_tokens, expected)
    np.testing.assert_array_equal(result.hit_tokens_at(None), expected)
    assert result.warmup_requests == 12_031 // 2
    # traces/README.md: 288,500 block accesses, 182,790 unique ids -> 105,710 re-accesses, and a
    # block re-access need not be in the leading run, so block hits are at most that.
    assert result.curve.total_blocks_all == 288_500
    assert result.curve.hit_blocks_all[-1] <= 288_500 - 182_790
    blk_all, _ = result.curve.block_hit_ratio_at(None)
    assert blk_all == pytest.approx(result.curve.hit_blocks_all[-1] / 288_500)


def test_mooncake_curve_between_steps(mooncake) -> None:
    """Between two steps the curve is flat; one block below a step it has the lower value."""
    _, result, (hashes, inp) = mooncake
    steps = result.curve.capacity_blocks
    c = int(steps[len(steps) // 2])
    below = reference_hits(hashes, inp, 512, c - 1)
    assert result.curve.hit_tokens_at((c - 1) * 512)[0, 0] == sum(below)
    # a capacity that is not a whole number of blocks rounds down
    assert result.curve.hit_tokens_at(c * 512 - 1)[0, 0] == sum(below)


def test_standard_capacities_and_grid(mooncake) -> None:
    """The contract's capacities are all there; the drawn curve is exact at its points."""
    _, result, _ = mooncake
    assert STANDARD_CAPACITIES_TOKENS[:-1] == (16384, 65536, 262144, 1048576, 4194304, 16777216)
    assert STANDARD_CAPACITIES_TOKENS[-1] is None
    grid = curve_grid(result.curve, max_points=50)
    assert 0 < grid.shape[0] <= 50 and np.all(np.diff(grid) > 0)
    all_, _ = result.curve.ratios_on_grid(grid)
    for cap, ratio in zip(grid[::10], all_[::10], strict=True):
        assert ratio == pytest.approx(
            result.hit_tokens_at(int(cap)).sum() / result.input_tokens.sum()
        )


def test_numba_not_imported_by_package() -> None:
    """Importing kvadvisor (and its cache package) does not import numba."""
    import subprocess

    code = "import kvadvisor.cache, kvadvisor.pipeline, sys; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_no_hashes_is_an_error_for_the_engine() -> None:
    """The engine refuses a trace without hashes (the report says 'prefix reuse unknown')."""
    table = pa.table({"arrival_s": [0.0], "input_tokens": [5], "output_tokens": [1]})
    trace = build_trace(table, path="t.csv", source_format="test", block_tokens=None)
    with pytest.raises(TraceError, match="prefix reuse is unknown"):
        simulate_prefix_cache(trace)


def test_non_positive_block_size_is_a_trace_error() -> None:
    """A trace whose block size is 0 tokens cannot turn hit blocks into tokens: refused."""
    import dataclasses

    trace = dataclasses.replace(make_trace([[1], [1]], [4, 4], 4), block_tokens=0)
    with pytest.raises(TraceError, match="block_tokens must be positive, got 0"):
        simulate_prefix_cache(trace)


def test_too_many_accesses_for_the_exact_pass(monkeypatch) -> None:
    """Past the int32 kernel's limit the exact pass refuses and points to sampling."""
    import kvadvisor.cache.prefix as prefix

    monkeypatch.setattr(prefix, "MAX_EXACT_ACCESSES", 3)
    trace = make_trace([[1, 2], [1, 2]], [8, 8], 4)
    with pytest.raises(ConfigError, match=r"4 block accesses exceed .*--cache-sample-rate"):
        simulate_prefix_cache(trace)


def test_sampled_result_has_no_per_request_hits() -> None:
    """Per-request hits need the exact pass's distances; a sampled result says so."""
    trace = make_trace([[1, 2], [1, 2]], [8, 8], 4)
    sampled = simulate_prefix_cache(trace, sample_rate=1.0)
    assert not sampled.exact
    with pytest.raises(ValueError, match="sampled curve has no per-request hits"):
        sampled.hit_tokens_at(8)


def test_bad_warmup() -> None:
    """A warm-up fraction outside [0, 1) is a user error."""
    trace = make_trace([[1]], [5], 4)
    with pytest.raises(ConfigError, match="warmup fraction"):
        simulate_prefix_cache(trace, warmup_fraction=1.0)


def test_dense_remap_of_64_bit_hashes() -> None:
    """Arbitrary 64-bit keys get ids in order of first use; small ids pass through."""
    keys = np.array([2**63 - 1, -(2**63), 7, 2**63 - 1, 0, 7], np.int64)
    ids, bound = dense_block_ids(keys)
    np.testing.assert_array_equal(ids, [0, 1, 2, 0, 3, 2])
    assert bound == 4
    ids, bound = dense_block_ids(np.array([3, 0, 3], np.int64))
    np.testing.assert_array_equal(ids, [3, 0, 3])
    assert bound == 4


# --- random traces (hypothesis) --------------------------------------------------------------


@st.composite
def random_traces(draw):
    """Random requests over a small alphabet (so blocks repeat), chained or arbitrary hashes."""
    n = draw(st.integers(1, 25))
    alphabet = draw(st.integers(1, 12))
    block_tokens = draw(st.sampled_from([1, 4, 16]))
    big = draw(st.booleans())
    salt = draw(st.integers(-(2**62), 2**62))
    hashes, inp = [], []
    for _ in range(n):
        blocks = draw(st.lists(st.integers(0, alphabet - 1), max_size=8))
        if big:  # arbitrary 64-bit hashes (negative too): the hash-map path
            blocks = [(b * 0x9E3779B97F4A7C15 + salt) % 2**64 - 2**63 for b in blocks]
        hashes.append(blocks)
        full = len(blocks) * block_tokens
        inp.append(draw(st.integers(max(0, full - block_tokens), full + 2 * block_tokens)))
    warmup = draw(st.sampled_from([0.0, 0.5, 0.9]))
    return hashes, inp, block_tokens, warmup


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(random_traces())
def test_random_equals_reference(case) -> None:
    """At every capacity from 0 to past the number of distinct blocks: equal to the replay."""
    hashes, inp, bt, warmup = case
    result = simulate_prefix_cache(make_trace(hashes, inp, bt), warmup_fraction=warmup)
    distinct = len({h for blocks in hashes for h in blocks})
    for c in range(0, distinct + 2):
        expected = reference_hits(hashes, inp, bt, c)
        np.testing.assert_array_equal(result.hit_tokens_at(c * bt), expected)
        all_, steady = result.curve.token_hit_ratio_at(c * bt)
        if sum(inp):
            assert all_ == pytest.approx(sum(expected) / sum(inp))
        w = result.warmup_requests
        if sum(inp[w:]):
            assert steady == pytest.approx(sum(expected[w:]) / sum(inp[w:]))


@SETTINGS
@given(random_traces())
def test_invariants(case) -> None:
    """Monotone in capacity, zero at zero, capped by input, and the unbounded closed form."""
    hashes, inp, bt, warmup = case
    result = simulate_prefix_cache(make_trace(hashes, inp, bt), warmup_fraction=warmup)
    grid = np.arange(0, 40) * bt
    hits = result.curve.hit_tokens_at(grid)
    assert np.all(np.diff(hits, axis=1) >= 0)
    assert np.all(hits[:, 0] == 0)
    assert np.all(result.hit_tokens <= np.asarray(inp))
    assert np.all(result.hit_tokens_at(0) == 0)
    # unbounded: tokens of the leading blocks that were seen in any earlier request
    seen: set[int] = set()
    expected = []
    for blocks, n_in in zip(hashes, inp, strict=True):
        k = 0
        while k < len(blocks) and blocks[k] in seen:
            k += 1
        expected.append(min(k * bt, n_in))
        seen.update(blocks)
    np.testing.assert_array_equal(result.hit_tokens, expected)
    cum = result.curve.hit_tokens_all
    assert (int(cum[-1]) if cum.shape[0] else 0) == sum(expected)


def _scattered(trace):
    """The trace with its dense ids replaced by scattered 64-bit hashes (a bijection)."""
    _, values = trace.hash_arrays()
    with np.errstate(over="ignore"):
        scattered = (values.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
    col = trace.table["block_hashes"].combine_chunks()
    hashes = pa.ListArray.from_arrays(col.offsets, pa.array(scattered, pa.int64()))
    table = trace.table.set_column(
        trace.table.column_names.index("block_hashes"), "block_hashes", hashes
    )
    return build_trace(table, path="x", source_format="test", block_tokens=512)


def test_mooncake_64_bit_hashes_same_as_dense_ids(mooncake) -> None:
    """Replacing Mooncake's dense ids by scattered 64-bit hashes (a bijection) changes nothing."""
    trace, result, _ = mooncake
    other = simulate_prefix_cache(_scattered(trace))
    np.testing.assert_array_equal(other.hit_tokens, result.hit_tokens)
    for cap in (512, 2**20, 2**24):
        np.testing.assert_array_equal(other.hit_tokens_at(cap), result.hit_tokens_at(cap))
    np.testing.assert_array_equal(other.curve.capacity_blocks, result.curve.capacity_blocks)


def test_the_exact_pass_hands_its_ids_to_routing_and_reuse(mooncake, monkeypatch) -> None:
    """Routing and reuse times take the exact pass's ids instead of finding them again.

    Mooncake's small ids are used as they are (no copy); scattered 64-bit hashes are remapped
    once, by the pass, and routing and reuse on that trace give the dense trace's results
    (the remap is a bijection) with a second remap made to fail.
    """
    import kvadvisor.cache.prefix as prefix
    from kvadvisor.cache.routing import RoutingPolicy

    trace, result, _ = mooncake
    offsets, values = trace.hash_arrays()
    ids, bound = pass_block_ids(result, values)
    assert ids is values and bound == int(values.max()) + 1
    scattered = _scattered(trace)
    other = simulate_prefix_cache(scattered)
    _, hashed = scattered.hash_arrays()
    expected, expected_bound = dense_block_ids(hashed)
    np.testing.assert_array_equal(other.block_ids, expected)
    assert other.id_bound == expected_bound == bound
    # Not kept unless asked (the streamed pass): then nothing is claimed about the ids.
    bare = simulate_arrays(
        offsets,
        hashed,
        trace.column_np("input_tokens"),
        512,
        warmup_requests=0,
        warmup_fraction=0.0,
    )
    assert bare.id_bound is None and bare.block_ids is None

    def _no_second_remap(values):
        raise AssertionError("the hashes were remapped again")

    monkeypatch.setattr(prefix, "_remap", _no_second_remap)
    assert reused(scattered, other) == reused(trace, result)
    kwargs = dict(
        instances=4,
        capacities_tokens=[2**20, None],
        policies=[RoutingPolicy.RANDOM, RoutingPolicy.PREFIX_AWARE],
    )
    assert routed(scattered, pooled=other, **kwargs) == routed(trace, pooled=result, **kwargs)


def _literal_distances(hashes: list[list[int]]) -> list[int]:
    """Leading-run distances by a literal recency list, access by access.

    Per access, the running maximum of the distinct blocks used since each block's last use
    (COLD from the request's first unseen block on).
    """
    from kvadvisor.cache.stackdist import COLD

    recency: list[int] = []  # least recent first
    out = []
    for blocks in hashes:
        running, cold = 0, False
        for b in blocks:
            if cold or b not in recency:
                cold = True
                out.append(int(COLD))
                continue
            running = max(running, len(recency) - 1 - recency.index(b))
            out.append(running)
        for b in blocks:
            if b in recency:
                recency.remove(b)
            recency.append(b)
    return out


@st.composite
def long_requests(draw):
    """Requests of up to 150 blocks, so markers move in whole words and across them.

    Runs resent from earlier requests (chained prefixes), new blocks, and repeats inside a
    request.
    """
    hashes: list[list[int]] = []
    fresh = iter(range(10**6))
    for _ in range(draw(st.integers(1, 12))):
        blocks: list[int] = []
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["resend", "new", "repeat"]))
            if kind == "resend" and hashes:
                src = hashes[draw(st.integers(0, len(hashes) - 1))]
                a = draw(st.integers(0, len(src)))
                blocks += src[a : a + draw(st.integers(0, 80))]
            elif kind == "repeat" and blocks:
                blocks.append(blocks[draw(st.integers(0, len(blocks) - 1))])
            else:
                blocks += [next(fresh) for _ in range(draw(st.integers(1, 70)))]
        hashes.append(blocks[:150])
    return hashes


@SETTINGS
@given(long_requests())
def test_distances_equal_a_literal_recency_list(hashes) -> None:
    """The compiled pass's distances, access by access, on long requests (word-sized moves)."""
    from kvadvisor.cache.stackdist import leading_distances

    offsets = np.concatenate([[0], np.cumsum([len(h) for h in hashes])]).astype(np.int64)
    values = np.asarray([v for h in hashes for v in h], dtype=np.int64)
    ids, bound = dense_block_ids(values)
    expected = _literal_distances(hashes)
    largest = leading_distances(offsets, ids, bound)
    assert ids.tolist() == expected
    finite = [d for d in expected if d != int(np.iinfo(np.int32).max)]
    assert largest == max(finite, default=-1)


def test_writability_compiles_no_second_kernel_signature() -> None:
    """A read-only and a writable hash array run the same compiled remap (prefix.read_only).

    numba types an array's writability, so without the read-only view each read path (arrow
    buffers are read-only, copies are not) compiled the kernel once more.
    """
    from kvadvisor.cache import stackdist
    from kvadvisor.cache.prefix import dense_block_ids

    writable = np.array([2**40 + 3, 2**41 + 5, 2**40 + 3, 2**42], np.int64)
    frozen = writable.copy()
    frozen.flags.writeable = False
    ids, bound = dense_block_ids(writable)
    before = len(stackdist.remap_dense.signatures)
    again, bound_again = dense_block_ids(frozen)
    assert len(stackdist.remap_dense.signatures) == before
    assert ids.tolist() == again.tolist() == [0, 1, 0, 2] and bound == bound_again == 3
