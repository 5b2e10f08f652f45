"""The replay against values computed independently: step model, queueing theory, cache engine.

Each check is one of the issue's: one request alone, Little's law, Pollaczek-Khinchine, the
exact cache engine's hit ratio, concurrent loads sharing a tier, the seed's cold-read TTFTs,
and the Azure code trace's stage split. Expected values come from the step table's own
``step_s``, closed-form results, ``kvadvisor.cache`` and the seed note, never from the loop.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvadvisor.cache.prefix import simulate_arrays
from kvadvisor.cache.tiers import CacheTierSpec, tier_hit_tokens_per_request
from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.models import get_model
from kvadvisor.fleet import ReplayContext, ReplayOptions, TraceArrays, request_columns, summarize
from kvadvisor.fleet.build import kv_model, pool_tokens, roofline_for

# Toy resolved fleets, built by hand: a test sets one mechanism's input directly (a plan
# reaches it only through defaults), which only tests and benchmarks may (test_architecture).
from kvadvisor.fleet.engine import run_resolved
from kvadvisor.fleet.resolved import (
    ResolvedFleet,
    ResolvedScheduler,
    ResolvedStage,
    ResolvedTier,
    RouterPolicy,
    Scope,
)
from kvadvisor.perfmodel import kv_size
from kvadvisor.perfmodel.step import StepTable
from kvadvisor.trace import read_trace
from kvadvisor.units import BYTES_PER_GB
from kvadvisor.vocab import Stage, Topology

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def replay_resolved(trace, fleet, options=None):  # type: ignore[no-untyped-def]
    """A toy resolved fleet replayed and summarised (``kvadvisor.fleet.replay`` takes a Plan)."""
    return summarize(run_resolved(trace, fleet, options))


def serving(step: StepTable, pool: int, replicas: int = 1, **kw: object) -> ResolvedStage:
    """One aggregated stage with vLLM's defaults for a large-memory GPU unless overridden."""
    sched = kw.pop("scheduler", ResolvedScheduler(8192, 1024, 16))
    return ResolvedStage(
        role=Stage.SERVING,
        instances=replicas,
        replicas_per_instance=1,
        gpus_per_replica=int(kw.pop("gpus", 1)),  # type: ignore[arg-type]
        step=step,
        pool_tokens=pool,
        scheduler=sched,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def qwen3_h200() -> tuple[StepTable, int, object]:
    """Qwen3-32B on one H200: roofline step table, GPU KV pool (tokens), the model."""
    model, gpu = get_model("qwen3-32b"), get_gpu("h200")
    pm, step = roofline_for(model, gpu, 1)
    return step, pool_tokens(pm), model


def constant_step(seconds: float) -> StepTable:
    """A step that takes ``seconds`` whatever it holds (deterministic service)."""
    grid = np.array([1.0, 2.0, 4.0])
    return StepTable("constant", grid, np.full(3, seconds), 0.0, 0.0, 1)


# ---- one request alone ---------------------------------------------------------------------


@pytest.mark.parametrize("prompt", [3000, 20_000])
def test_one_request_alone_is_the_step_model_exactly(prompt: int) -> None:
    """TTFT = its prefill chunks' steps; E2E adds one decode step per later token."""
    step, pool, model = qwen3_h200()
    kv = kv_model(model)
    out = 20
    arrays = TraceArrays.of(np.array([0.0]), np.array([prompt]), np.array([out]))
    dep = ResolvedFleet("one", Topology.AGGREGATED, (serving(step, pool),), kv)
    cols = request_columns(run_resolved(arrays, dep))
    # chunks of at most 8192 tokens (vLLM's max_num_batched_tokens), each after the last
    prefill, done_tokens = 0.0, 0
    while done_tokens < prompt:
        m = min(8192, prompt - done_tokens)
        pairs = step.attention_pairs(m, done_tokens)
        prefill += float(step.step_s(m, pairs, np.zeros(1), 1.0)[0])
        done_tokens += m
    layout = kv_size(model, "bf16", 1).rank_layout
    decode = sum(
        float(step.step_s(1, 0.0, layout.bytes_for(np.array([prompt + k])), 1.0)[0])
        for k in range(1, out)
    )
    assert cols["ttft_s"][0] == pytest.approx(prefill, rel=1e-12)
    assert cols["e2e_s"][0] == pytest.approx(prefill + decode, rel=1e-12)
    assert cols["prefill_gpu_s"][0] == pytest.approx(prefill, rel=1e-12)
    assert cols["decode_gpu_s"][0] == pytest.approx(decode, rel=1e-12)
    assert cols["queue_s"][0] == 0.0


def test_compiled_step_time_agrees_with_the_step_table() -> None:
    """The loop's mirror of StepTable.step_s gives the same time (windowed model too)."""
    from kvadvisor.fleet import kernel

    rng = np.random.default_rng(0)
    for name in ("qwen3-32b", "gpt-oss-120b"):
        model = get_model(name)
        _, table = roofline_for(model, get_gpu("h200"), 2)
        for _ in range(200):
            tokens = float(rng.integers(1, 3_000_000))
            seqs = float(rng.integers(1, 5000))
            m, p = float(rng.integers(1, 9000)), float(rng.integers(0, 200_000))
            kvb = float(rng.uniform(0, 1e10)) if rng.random() < 0.8 else 0.0
            pairs = kernel.attention_pairs(
                m, p, table.full_attention_layers, table.sliding_window_layers, table.window_tokens
            )
            assert pairs == pytest.approx(float(table.attention_pairs(m, p)), rel=1e-12)
            got = kernel.step_time(
                table.tokens_grid,
                table.tokens_s,
                table.s_per_pair,
                table.decode_s_per_kv_byte,
                table.logits_grid,
                table.logits_s,
                table.prefill_attention_fixed_s,
                table.decode_attention_fixed_s,
                tokens,
                seqs,
                pairs,
                kvb,
            )
            want = float(table.step_s(tokens, pairs, np.array([kvb]), seqs)[0])
            assert got == pytest.approx(want, rel=1e-12)


def test_compiled_interpolation_is_numpys_to_the_bit() -> None:
    """The loop's scalar interpolation returns np.interp's value exactly inside the grid.

    With no attention pairs and no KV bytes, ``step_time`` is the two interpolated tables
    summed; the points are random, the grid points themselves and below the first.
    """
    from kvadvisor.fleet import kernel

    _, table = roofline_for(get_model("qwen3-32b"), get_gpu("h200"), 2)
    grid, lgrid = table.tokens_grid, table.logits_grid
    rng = np.random.default_rng(1)
    tokens = np.concatenate([rng.uniform(grid[0] / 2, grid[-1], 300), grid])
    seqs = np.concatenate([rng.uniform(0.0, lgrid[-1], 300), np.resize(lgrid, grid.shape[0])])
    for tok, seq in zip(tokens, seqs, strict=True):
        got = kernel.step_time(
            grid, table.tokens_s, 1.0, 1.0, lgrid, table.logits_s, 0.0, 0.0, tok, seq, 0.0, 0.0
        )
        want = np.interp(tok, grid, table.tokens_s) + np.interp(seq, lgrid, table.logits_s)
        assert got == want, (tok, seq)


# ---- queueing theory -----------------------------------------------------------------------


def test_littles_law_for_constant_rate_identical_requests() -> None:
    """Mean requests in the system (the loop's own queue and batch series) = rate x mean E2E."""
    step, pool, model = qwen3_h200()
    rate, n = 2.0, 4000
    arrays = TraceArrays.of(np.arange(n) / rate, np.full(n, 1500), np.full(n, 200))
    dep = ResolvedFleet("little", Topology.AGGREGATED, (serving(step, pool),), kv_model(model))
    run = run_resolved(arrays, dep)
    cols = request_columns(run)
    st = run.stages[0]
    w = run.window_s
    # steady state: the middle half of the arrivals
    lo, hi = int(0.25 * n / rate / w), int(0.75 * n / rate / w)
    in_system = (st.waiting[lo:hi] + st.running[lo:hi]).sum() / ((hi - lo) * w)
    middle = (arrays.arrival_s >= lo * w) & (arrays.arrival_s < hi * w)
    assert in_system > 5  # a real batch, not an idle server
    assert not replay_resolved(arrays, dep).overload.overloaded  # stationary: Little's law applies
    assert in_system == pytest.approx(rate * cols["e2e_s"][middle].mean(), rel=0.01)


def test_pollaczek_khinchine_mean_wait_single_server_deterministic_service() -> None:
    """M/D/1: mean wait lambda S^2 / (2 (1 - rho)) within 5% (one request per step)."""
    service, lam, n = 0.1, 7.0, 200_000
    arrivals = np.cumsum(np.random.default_rng(1).exponential(1 / lam, n))
    arrays = TraceArrays.of(arrivals, np.full(n, 10), np.ones(n, np.int64))
    kv = kv_model(get_model("qwen3-32b"))
    stage = serving(constant_step(service), 10**6, scheduler=ResolvedScheduler(8192, 1, 16))
    cols = request_columns(
        run_resolved(arrays, ResolvedFleet("md1", Topology.AGGREGATED, (stage,), kv))
    )
    rho = lam * service
    expected = lam * service**2 / (2 * (1 - rho))
    assert cols["queue_s"].mean() == pytest.approx(expected, rel=0.05)
    assert np.allclose(cols["e2e_s"] - cols["queue_s"], service)


# ---- prefix hits -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mooncake_head() -> TraceArrays:
    """The first 3,000 requests of the Mooncake conversation sample, with their hashes."""
    trace = read_trace(SAMPLES / "mooncake_conversation.parquet")
    return TraceArrays.from_trace(trace).take(np.arange(3000))


def test_hit_ratio_equals_the_exact_cache_engine_one_replica(mooncake_head: TraceArrays) -> None:
    """Unbounded tiers, one replica: the replay's hit ratio is the engine's, tier by tier.

    The replay counts whole KV pages (16 tokens here): each of the engine's hits, which end
    at the prompt's end inside a 512-token block, is rounded down to the page.
    """
    step, pool, model = qwen3_h200()
    dram = ResolvedTier("dram", "dram", Scope.REPLICA, None, 50e9, 50e9)
    stage = serving(step, pool, tiers=(dram,))
    page = stage.scheduler.page_tokens
    assert page == 16
    dep = ResolvedFleet("hits", Topology.AGGREGATED, (stage,), kv_model(model))
    run = run_resolved(mooncake_head, dep, ReplayOptions(drain_cap_s=1e6))
    res = replay_resolved(mooncake_head, dep, options=ReplayOptions(drain_cap_s=1e6))
    # the engine, from the trace's own hashes (not the replay's dense ids)
    trace = read_trace(SAMPLES / "mooncake_conversation.parquet")
    offsets, values = trace.hash_arrays()
    n = mooncake_head.requests
    inp = trace.column_np("input_tokens")[:n]
    engine = simulate_arrays(
        offsets[: n + 1], values[: offsets[n]], inp, 512, warmup_requests=0, warmup_fraction=0.0
    )
    split = tier_hit_tokens_per_request(
        engine, [CacheTierSpec("gpu", pool), CacheTierSpec("dram", None)]
    )
    gpu_hit = split[0] // page * page
    all_hit = (split[0] + split[1]) // page * page
    # the case: some hits end inside a page
    assert ((split[0] + split[1]) % page != 0).any()
    assert all_hit.sum() < (split[0] + split[1]).sum()
    assert res.hit_ratio == pytest.approx(all_hit.sum() / inp.sum(), rel=1e-12)
    st = run.stages[0]
    gpu_served = st.hit_tokens - st.tier_hit_tokens.sum(axis=0)
    assert split[1].sum() > 0
    assert gpu_served.sum() == gpu_hit.sum()
    assert st.tier_hit_tokens[0].sum() == (all_hit - gpu_hit).sum()
    # every hit below the GPU was loaded (no recompute rule here)
    assert st.loaded_tokens.sum() == (all_hit - gpu_hit).sum()
    assert res.tiers[0].hit_ratio == pytest.approx((all_hit - gpu_hit).sum() / inp.sum(), rel=1e-12)


# ---- loads sharing a tier, and the seed's cold read ---------------------------------------------


def cold_read_scenario(read_gb_per_s: float, n: int = 16) -> tuple[TraceArrays, ResolvedFleet]:
    """The seed's cold read: n requests whose 8,192-token prefixes sit only on a disk tier.

    Qwen2.5-32B on one H200 (bf16, roofline defaults); the n requests arrive together at
    t = 300 s.

    Warm-up: each prefix is seen once (written to the tier), then 40 requests of new content
    push them out of the GPU's prefix cache (about 2,000 blocks it cannot hold). The measured
    requests are the prefix plus a new 1,024-token question (long-document QA).
    """
    block, prefix_blocks, question_blocks = 512, 16, 2
    arrival, inp, offsets, ids = [], [], [0], []
    next_id = 10_000

    def request(t: float, blocks: list[int]) -> None:
        arrival.append(t)
        inp.append(len(blocks) * block)
        ids.extend(blocks)
        offsets.append(len(ids))

    def fresh(k: int) -> list[int]:
        nonlocal next_id
        next_id += k
        return list(range(next_id - k, next_id))

    prefixes = [list(range(i * prefix_blocks, (i + 1) * prefix_blocks)) for i in range(n)]
    for i, p in enumerate(prefixes):
        request(float(i), p + fresh(question_blocks))
    for j in range(40):
        request(20.0 + 2.0 * j, fresh(50))
    for p in prefixes:
        request(300.0, p + fresh(question_blocks))
    arrays = TraceArrays.of(
        np.array(arrival),
        np.array(inp),
        np.ones(len(arrival), np.int64),
        offsets=np.array(offsets),
        hashes=np.array(ids),
        block_tokens=block,
    )
    model = get_model("qwen2.5-32b")
    pm, step = roofline_for(model, get_gpu("h200"), 1)
    disk = ResolvedTier("disk", "ssd", Scope.REPLICA, None, read_gb_per_s * BYTES_PER_GB, 5e9)
    stage = serving(step, pool_tokens(pm), tiers=(disk,))
    return arrays, ResolvedFleet("cold", Topology.AGGREGATED, (stage,), kv_model(model))


def test_concurrent_loads_share_the_tier_and_finish_by_n_s_over_b() -> None:
    """16 loads of S bytes at once on a tier of B bytes/s: every one done by N S / B."""
    arrays, dep = cold_read_scenario(0.98)
    run = run_resolved(arrays, dep)
    st = run.stages[0]
    measured = arrays.arrival_s >= 300.0
    s_bytes = 8192 * dep.kv.bytes_per_token
    bound = 16 * s_bytes / (0.98 * BYTES_PER_GB)
    loads = st.ready_s[measured] - 300.0
    assert (st.loaded_tokens[measured] == 8192).all()
    assert loads.max() <= bound * (1 + 1e-9)
    # equal shares: identical loads started together all end at the bound itself
    assert loads.min() == pytest.approx(bound, rel=1e-9)


@pytest.mark.parametrize(("bandwidth", "seed_ttft_s"), [(0.98, 37.97), (5.23, 9.30)])
def test_seed_cold_read_ttft_within_25_percent(bandwidth: float, seed_ttft_s: float) -> None:
    """The seed's R1 test: 16 concurrent cold reads of Qwen2.5-32B prefixes on one card."""
    arrays, dep = cold_read_scenario(bandwidth)
    cols = request_columns(run_resolved(arrays, dep))
    ttft = cols["ttft_s"][arrays.arrival_s >= 300.0].mean()
    assert ttft == pytest.approx(seed_ttft_s, rel=0.25)


# ---- the Azure code trace's stage split ---------------------------------------------------------


def test_azure_code_split_prefill_heavy_and_decode_bounded_when_spread() -> None:
    """One H200 replica: clearly prefill-heavy; eight: decode GPU time bounded.

    Eight replicas do the same prefill work but for the steps' fixed costs (per-step overhead,
    LM head, attention floors), paid by more, smaller steps: at least as much, within 10 %; their
    decode GPU time is never above every request decoding alone (the most spreading can cost).
    """
    trace = read_trace(SAMPLES / "azure_code_head.csv.zst")
    arrays = TraceArrays.from_trace(trace)
    step, pool, model = qwen3_h200()
    kv = kv_model(model)
    ctx = ReplayContext(arrays)
    one = replay_resolved(ctx, ResolvedFleet("1", Topology.AGGREGATED, (serving(step, pool),), kv))
    eight = replay_resolved(
        ctx, ResolvedFleet("8", Topology.AGGREGATED, (serving(step, pool, 8),), kv)
    )
    assert one.stage_split.prefill_share is not None and one.stage_split.prefill_share >= 0.8
    pf_one, pf_eight = one.stage_split.prefill_gpu_s, eight.stage_split.prefill_gpu_s
    assert pf_one <= pf_eight <= 1.1 * pf_one
    layout = kv_size(model, "bf16", 1).rank_layout
    alone = 0.0
    for i, o in zip(arrays.input_tokens, arrays.output_tokens, strict=True):
        ctxs = i + np.arange(1, o)
        ones = np.ones(ctxs.size)
        alone += float(step.step_s(ones, 0.0, layout.bytes_for(ctxs), ones).sum())
    assert one.stage_split.decode_gpu_s < eight.stage_split.decode_gpu_s <= alone


def test_least_outstanding_router_uses_every_replica() -> None:
    """The load-aware router spreads a burst: no replica idles while another queues."""
    step, pool, model = qwen3_h200()
    n = 64
    arrays = TraceArrays.of(np.zeros(n), np.full(n, 4000), np.full(n, 50))
    stage = serving(step, pool, 4, router=RouterPolicy.LEAST_OUTSTANDING)
    run = run_resolved(arrays, ResolvedFleet("lor", Topology.AGGREGATED, (stage,), kv_model(model)))
    counts = np.bincount(run.stages[0].replica, minlength=4)
    assert (counts == n // 4).all()
