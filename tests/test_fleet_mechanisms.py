"""Each replay mechanism on a toy fleet whose every time is computable by hand.

Steps take a constant 0.1 s (whatever they hold), KV is 1,000 bytes per token: write buffers,
write policies, the P-to-D link, the recompute threshold, best-effort prefetch, preemption
(recompute and swap) and decode-time offload reads, each against hand arithmetic.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvadvisor.fleet import ReplayOptions, TraceArrays, request_columns, summarize

# Toy resolved fleets, built by hand: a test sets one mechanism's input directly (a plan
# reaches it only through defaults), which only tests and benchmarks may (test_architecture).
from kvadvisor.fleet.engine import run_resolved
from kvadvisor.fleet.resolved import (
    LoadMode,
    Preemption,
    PrefetchPolicy,
    ResolvedFleet,
    ResolvedKv,
    ResolvedLink,
    ResolvedScheduler,
    ResolvedStage,
    ResolvedTier,
    Scope,
    WritePolicy,
)
from kvadvisor.perfmodel.step import StepTable
from kvadvisor.vocab import Stage, Topology

STEP_S = 0.1
KVB = 1000.0
KV = ResolvedKv(bytes_per_token=KVB, gpu_bytes_per_token=KVB, rank_full_bytes_per_token=KVB)


def replay_resolved(trace, fleet, options=None):  # type: ignore[no-untyped-def]
    """A toy resolved fleet replayed and summarised (``kvadvisor.fleet.replay`` takes a Plan)."""
    return summarize(run_resolved(trace, fleet, options))


def constant_step(seconds: float = STEP_S, s_per_kv: float = 0.0) -> StepTable:
    """Every step takes ``seconds`` plus ``s_per_kv`` per decode KV byte."""
    grid = np.array([1.0, 2.0, 4.0])
    return StepTable("constant", grid, np.full(3, seconds), 0.0, s_per_kv, 1)


def stage(role: Stage = Stage.SERVING, **kw: object) -> ResolvedStage:
    """A one-replica stage on the constant step, vLLM-like scheduler defaults."""
    base: dict[str, object] = dict(
        role=role,
        instances=1,
        replicas_per_instance=1,
        gpus_per_replica=1,
        step=constant_step(),
        pool_tokens=10**6,
        scheduler=ResolvedScheduler(8192, 64, 16),
    )
    base.update(kw)
    return ResolvedStage(**base)  # type: ignore[arg-type]


def tier(**kw: object) -> ResolvedTier:
    """A replica-scoped disk tier (1 GB/s read, 1 MB/s write) unless overridden."""
    base: dict[str, object] = dict(
        name="disk",
        kind="ssd",
        scope=Scope.REPLICA,
        capacity_tokens=None,
        read_bytes_per_s=1e9,
        write_bytes_per_s=1e6,
    )
    base.update(kw)
    return ResolvedTier(**base)  # type: ignore[arg-type]


def one(input_tokens: int = 1000, output_tokens: int = 1) -> TraceArrays:
    """One request at t = 0 without hashes."""
    return TraceArrays.of(np.array([0.0]), np.array([input_tokens]), np.array([output_tokens]))


def aggregated(*st: ResolvedStage) -> ResolvedFleet:
    """An aggregated deployment of the toy model."""
    return ResolvedFleet("toy", Topology.AGGREGATED, st, KV)


def test_a_full_write_buffer_blocks_the_step_that_wrote() -> None:
    """1,000 new tokens (1 MB) into a 0.4 MB buffer at 1 MB/s: the step waits 0.6 s."""
    t = tier(write_buffer_bytes=0.4e6)
    run = run_resolved(one(), aggregated(stage(tiers=(t,))))
    cols = request_columns(run)
    assert cols["ttft_s"][0] == pytest.approx(STEP_S + 0.6)
    assert run.stages[0].counters["blocked_writes"] == 1
    # everything written drains at the write bandwidth
    assert run.stages[0].write_bytes.sum() == pytest.approx(1e6)
    assert run.stages[0].write_bytes.max() <= 1e6 * run.window_s * (1 + 1e-9)


def test_a_full_write_buffer_drops_the_excess_where_the_engine_drops() -> None:
    """The same write with on_full drop: no stall, 0.6 MB lost and counted."""
    t = tier(write_buffer_bytes=0.4e6, drop_when_full=True)
    res = replay_resolved(one(), aggregated(stage(tiers=(t,))))
    assert res.requests.ttft_s is not None and res.requests.ttft_s.mean == pytest.approx(STEP_S)
    assert res.counts.dropped_writes == 1
    assert res.counts.dropped_write_bytes == pytest.approx(0.6e6)


@pytest.mark.parametrize("policy", list(WritePolicy))
def test_write_policies_write_the_same_bytes_at_different_times(policy: WritePolicy) -> None:
    """Write-through writes as prefill ends (t = 0.1 s); write-back when the request ends."""
    t = tier(write_bytes_per_s=1e9)
    run = run_resolved(one(output_tokens=30), aggregated(stage(tiers=(t,), write_policy=policy)))
    st = run.stages[0]
    assert st.write_bytes.sum() == pytest.approx(1e6)
    first = int(np.flatnonzero(st.write_bytes[0])[0])
    written_at = first * run.window_s
    expected = STEP_S if policy is WritePolicy.WRITE_THROUGH else STEP_S * 30
    assert written_at == pytest.approx(expected, abs=run.window_s)


def test_disaggregated_kv_crosses_the_link_before_decode() -> None:
    """TTFT = prefill step + 4,000 tokens x 1,000 B / 2 GB/s + 1 ms; then 9 decode steps."""
    trace = one(input_tokens=4000, output_tokens=10)
    dep = ResolvedFleet(
        "pd",
        Topology.DISAGGREGATED,
        (stage(Stage.PREFILL), stage(Stage.DECODE)),
        KV,
        ResolvedLink(2e9, 1e-3),
    )
    run = run_resolved(trace, dep)
    cols = request_columns(run)
    transfer = 4000 * KVB / 2e9 + 1e-3
    assert cols["ttft_s"][0] == pytest.approx(STEP_S + transfer)
    assert cols["e2e_s"][0] == pytest.approx(STEP_S + transfer + 9 * STEP_S)
    res = replay_resolved(trace, dep)
    assert res.link is not None
    assert res.link.bytes_per_s.peak > 0
    assert sum(st.read_bytes.sum() for st in run.stages) == pytest.approx(4000 * KVB)


def hashed(extra: tuple[tuple[float, list[int]], ...] = ()) -> TraceArrays:
    """A 10-block prefix on the disk tier only, asked for again at 100 s.

    Seen at t = 0, pushed out of the GPU cache by 30 new blocks at 50 s, then ``extra``
    requests (time, blocks), then the prefix plus a new block at 100 s. Blocks are 16 tokens;
    the GPU pool of 496 tokens (31 blocks) holds the flush, not the prefix, so the last
    request's 160-token hit comes from the disk tier.
    """
    prefix = list(range(10))
    reqs = [(0.0, prefix + [1000]), (50.0, list(range(100, 130))), *extra]
    reqs.append((100.0, prefix + [2000]))
    offsets = np.cumsum([0] + [len(b) for _, b in reqs])
    return TraceArrays.of(
        np.array([t for t, _ in reqs]),
        np.array([16 * len(b) for _, b in reqs]),
        np.ones(len(reqs), np.int64),
        offsets=offsets,
        hashes=np.array([x for _, b in reqs for x in b]),
        block_tokens=16,
    )


POOL = 496


def test_a_hit_below_the_threshold_is_recomputed_and_counted() -> None:
    """A 160-token disk hit under a 256-token minimum: recomputed, not loaded."""
    st = stage(pool_tokens=POOL, tiers=(tier(),), min_load_tokens=256)
    run = run_resolved(hashed(), aggregated(st), ReplayOptions(window_s=1.0))
    s = run.stages[0]
    assert s.hit_tokens[-1] == 160
    assert s.loaded_tokens[-1] == 0 and s.recomputed_tokens[-1] == 160
    assert s.counters["recomputed_loads"] == 1


def test_a_hit_is_loaded_at_the_tier_bandwidth_before_prefill() -> None:
    """160 tokens (160 kB) at 1 MB/s: the load takes 0.16 s, then one prefill step."""
    st = stage(pool_tokens=POOL, tiers=(tier(read_bytes_per_s=1e6, latency_s=0.01),))
    cols = request_columns(run_resolved(hashed(), aggregated(st)))
    assert cols["loaded_tokens"][-1] == 160
    assert cols["load_s"][-1] == pytest.approx(0.16 + 0.01)
    assert cols["ttft_s"][-1] == pytest.approx(0.16 + 0.01 + STEP_S)


def test_best_effort_prefetch_keeps_what_arrived_and_recomputes_the_rest() -> None:
    """Prefetch at arrival, admitted when the GPU is next free (best effort).

    A one-block request arriving with it runs first (0.1 s, one sequence at a time); by then
    100 of the 160 tokens (1 MB/s for 0.1 s) are in: 100 loaded, 60 recomputed.
    """
    st = stage(
        pool_tokens=POOL,
        scheduler=ResolvedScheduler(8192, 1, 16),
        tiers=(tier(read_bytes_per_s=1e6),),
        load_mode=LoadMode.PREFETCH,
        prefetch_policy=PrefetchPolicy.BEST_EFFORT,
    )
    cols = request_columns(run_resolved(hashed(((100.0, [3000]),)), aggregated(st)))
    assert cols["loaded_tokens"][-1] == 100
    assert cols["recomputed_tokens"][-1] == 60


@pytest.mark.parametrize("mode", list(Preemption))
def test_preemption_when_the_batch_outgrows_the_pool(mode: Preemption) -> None:
    """Eight requests outgrowing a 1,600-token pool must preempt, and all still finish.

    Each has 100 prompt tokens and decodes 200; swapped KV crosses the host link, recomputed
    KV is counted.
    """
    n = 8
    trace = TraceArrays.of(np.zeros(n), np.full(n, 100), np.full(n, 200))
    st = stage(
        pool_tokens=1600,
        scheduler=ResolvedScheduler(8192, 64, 16, mode),
        swap_bytes_per_s=1e9,
    )
    run = run_resolved(trace, aggregated(st))
    c = run.stages[0].counters
    assert c["unfinished"] == 0
    assert c["preemptions"] > 0
    if mode is Preemption.SWAP:
        assert c["swaps"] == c["preemptions"] and c["swap_bytes"] > 0
    else:
        assert c["swaps"] == 0 and c["preemption_recompute_tokens"] > 0


def test_decode_offload_reads_the_kv_beyond_the_pool_every_step() -> None:
    """Decode-time offload: every step also reads the KV beyond the GPU pool.

    A 320-token context in a 160-token pool with a host tier: the pages beyond the pool (10 of
    16 tokens, growing) are read at 1 MB/s plus 1 ms each step.
    """
    st = stage(
        pool_tokens=160,
        tiers=(
            tier(
                name="host",
                kind="dram",
                read_bytes_per_s=1e6,
                write_bytes_per_s=1e9,
                latency_s=1e-3,
                read_iops=1e9,
                capacity_tokens=10_000,
            ),
        ),
        offload_tier="host",
    )
    cols = request_columns(run_resolved(one(320, 5), aggregated(st)))
    # prefill: 320 tokens = 20 pages, 10 beyond the pool -> that step reads them too
    expected = 0.0
    held_pages = 20
    for k in range(5):  # the prefill step, then 4 decode steps
        if k > 0 and (320 + k) > held_pages * 16:
            held_pages += 1
        over = held_pages - 10
        expected += STEP_S + 1e-3 + over * 16 * KVB / 1e6
    assert cols["e2e_s"][0] == pytest.approx(expected)
