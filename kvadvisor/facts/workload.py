"""Workload facts: the named numbers measured from the report's sections (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kvadvisor.facts.registry import collect
from kvadvisor.results.common import TraceSummary
from kvadvisor.results.report import (
    AdviceReport,
    IoDemand,
    ModelSummary,
    PrefixCache,
    StageSplit,
)
from kvadvisor.results.series import SeriesKey
from kvadvisor.rules.model import FactValue
from kvadvisor.units import BYTES_PER_GIB
from kvadvisor.vocab import CacheStatus

# Share of the unbounded hit ratio that defines the working set: the smallest cache that keeps
# 90% of the reuse a cache of unlimited size would get (the knee most capacity planners use).
WORKING_SET_HIT_SHARE = 0.9


def div(a: float | None, b: float | None) -> float | None:
    """The quotient a / b; None when either is unknown or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def curve_points(prefix_cache: PrefixCache) -> list[tuple[float, float]]:
    """The hit-ratio curve as points.

    (capacity tokens, steady hit ratio) at finite capacities, ascending: the cache engine's
    whole curve where the section carries it, else the standard curve points.
    """
    for series in prefix_cache.curve:
        if series.key is SeriesKey.HIT_RATIO_STEADY:
            return sorted(
                (float(x), float(y))
                for x, y in zip(series.x, series.y, strict=False)
                if x is not None and y is not None and math.isfinite(y)
            )
    out = []
    for p in prefix_cache.mrc:
        ratio = p.hit_ratio_steady if p.hit_ratio_steady is not None else p.hit_ratio_all
        if p.capacity_tokens is not None and ratio is not None:
            out.append((float(p.capacity_tokens), float(ratio)))
    return sorted(out)


def working_set_tokens(prefix_cache: PrefixCache) -> int | None:
    """The KV working set in tokens.

    Smallest finite capacity whose steady hit ratio reaches WORKING_SET_HIT_SHARE of the
    unbounded one; None if no point of the curve reaches it (or reuse is unknown).
    """
    target = prefix_cache.hit_ratio.steady
    if target is None:
        target = prefix_cache.hit_ratio.all
    if target is None:
        return None
    if target <= 0:
        return 0
    for capacity, ratio in curve_points(prefix_cache):
        if ratio >= WORKING_SET_HIT_SHARE * target:
            return int(capacity)
    return None


def hit_ratio_at(prefix_cache: PrefixCache | None, capacity_tokens: float) -> float | None:
    """Steady hit ratio at a capacity (a lower bound).

    Steady hit ratio at a capacity: the largest curve point not above it (a lower bound,
    since the LRU hit ratio never falls as capacity grows); None when reuse is unknown.
    """
    if prefix_cache is None or prefix_cache.hit_ratio.all is None:
        return None
    best = 0.0
    for capacity, ratio in curve_points(prefix_cache):
        if capacity <= capacity_tokens:
            best = ratio
    return best


def workload_facts(
    trace: TraceSummary,
    model: ModelSummary | None = None,
    stage_split: StageSplit | None = None,
    prefix_cache: PrefixCache | None = None,
    io: IoDemand | None = None,
    *,
    chunk_tokens: int = 256,
    extra: Mapping[str, float | int | bool | None] | None = None,
) -> dict[str, FactValue]:
    """Facts measured from the analysis results (pure).

    ``stage_split`` counts GPU-seconds (a replica's seconds × its GPUs, docs/stage-profiler.md),
    and so do the ``*_gpu_s`` facts: one quantity, one number wherever it is shown. ``extra``
    carries facts computed by the cache engine and the stage profiler from their own result
    objects (reuse times, break-even, memory fit); names must be registered.
    """
    n = trace.requests
    # Readers list the columns they produced; a summary without columns falls back on whether
    # the trace declared a block size (only traces with hashes do).
    has_hashes = (
        ("block_hashes" in trace.columns) if trace.columns else (trace.block_tokens is not None)
    )
    pairs: list[tuple[str, Any]] = [
        ("requests_count", n),
        ("trace_duration_s", trace.duration_s),
        ("arrival_rate_per_s", trace.arrival_rate_per_s),
        ("input_tokens_mean", div(trace.input_tokens_total, n)),
        ("output_tokens_mean", div(trace.output_tokens_total, n)),
        ("output_to_input_tokens_ratio", div(trace.output_tokens_total, trace.input_tokens_total)),
        ("prefix_reuse_measurable", bool(has_hashes)),
        ("block_tokens", trace.block_tokens),
        ("chunk_tokens", chunk_tokens),
    ]
    kv = model.kv_bytes_per_token if model is not None else None
    pairs.append(("kv_bytes_per_token", kv))
    if stage_split is not None:
        total = stage_split.prefill_s + stage_split.decode_s
        pairs += [
            ("prefill_gpu_s", stage_split.prefill_s),
            ("decode_gpu_s", stage_split.decode_s),
            ("prefill_share_gpu_time", div(stage_split.prefill_s, total)),
            ("decode_share_gpu_time", div(stage_split.decode_s, total)),
            ("prefill_to_decode_gpu_time_ratio", div(stage_split.prefill_s, stage_split.decode_s)),
            ("busy_gpus_mean", div(total, trace.duration_s)),
        ]
    if prefix_cache is not None and prefix_cache.hit_ratio.all is not None:
        ws = working_set_tokens(prefix_cache)
        pairs += [
            ("prefix_hit_ratio_unbounded", prefix_cache.hit_ratio.all),
            ("prefix_hit_ratio_steady", prefix_cache.hit_ratio.steady),
            ("kv_working_set_tokens", ws),
            ("kv_working_set_gib", None if ws is None or kv is None else ws * kv / BYTES_PER_GIB),
        ]
    if io is not None:
        w, r = io.write, io.read
        io_size = chunk_tokens * kv if kv else None
        pairs += [
            ("io_window_s", io.window_s),
            ("write_bytes_per_s_mean", w.mean_bytes_per_s),
            ("write_bytes_per_s_p99", w.p99_bytes_per_s),
            ("write_bytes_per_s_peak", w.peak_bytes_per_s),
            ("write_peak_to_mean", div(w.peak_bytes_per_s, w.mean_bytes_per_s)),
            ("write_p99_to_mean", div(w.p99_bytes_per_s, w.mean_bytes_per_s)),
            ("read_bytes_per_s_mean", r.mean_bytes_per_s),
            ("read_bytes_per_s_p99", r.p99_bytes_per_s),
            ("read_bytes_per_s_peak", r.peak_bytes_per_s),
            ("read_peak_to_mean", div(r.peak_bytes_per_s, r.mean_bytes_per_s)),
            ("io_size_bytes", io_size),
            ("write_iops_p99", div(w.p99_bytes_per_s, io_size)),
            ("read_iops_mean", div(r.mean_bytes_per_s, io_size)),
            ("read_iops_p99", div(r.p99_bytes_per_s, io_size)),
        ]
    elif kv:
        pairs.append(("io_size_bytes", chunk_tokens * kv))
    pairs += list((extra or {}).items())
    return collect(pairs)


# The reuse-time quantiles with a fact, by quantile.
REUSE_QUANTILE_FACTS = {0.5: "reuse_time_p50_s", 0.9: "reuse_time_p90_s"}
# Facts of read demand: absent when the profiler could not tell reads (no prefix hits known).
READ_FACTS = (
    "read_bytes_per_s_mean",
    "read_bytes_per_s_p99",
    "read_bytes_per_s_peak",
    "read_peak_to_mean",
    "read_iops_mean",
    "read_iops_p99",
)


def report_facts(report: AdviceReport, *, chunk_tokens: int = 256) -> dict[str, FactValue]:
    """Every workload fact the report's sections support (pure).

    Reads the contract sections (trace, model, stage_split, prefix_cache, io) and, where the
    cache engine and the stage profiler attached them, their richer results: reuse times and
    TTLs, the whole hit-ratio curve, memory fit, I/O counts at the chunk size.
    """
    extra: dict[str, Any] = {}
    pc, model, io, split = report.prefix_cache, report.model, report.io, report.stage_split
    kv = model.kv_bytes_per_token if model is not None else None
    if pc is not None:
        if pc.status is CacheStatus.UNKNOWN or pc.hit_ratio.all is None:
            extra["prefix_reuse_measurable"] = False
        if pc.reuse is not None:
            for q in pc.reuse.quantiles:
                if q.quantile in REUSE_QUANTILE_FACTS:
                    extra[REUSE_QUANTILE_FACTS[q.quantile]] = q.seconds
            for t in pc.reuse.ttl:
                if t.share == WORKING_SET_HIT_SHARE:
                    extra["retention_ttl_s"] = t.ttl_s
                    if kv:
                        extra["retention_capacity_gib"] = t.capacity_tokens * kv / BYTES_PER_GIB
    deployment = model.deployment if model is not None else None
    tp = deployment.tp if deployment is not None else 1
    memory = model.memory if model is not None else None
    if memory is not None:
        extra["model_weights_gib"] = memory.weight_bytes_per_gpu * tp / BYTES_PER_GIB
        extra["max_concurrent_requests_fit"] = memory.max_concurrent_requests
    if split is not None:
        extra["split_gpus_per_replica"] = tp
        extra["split_instances"] = split.instances
    if io is not None:
        chunk_tokens = io.chunk_tokens or chunk_tokens
        if io.write_io is not None:
            extra["write_iops_p99"] = io.write_io.p99_iops
            extra["io_size_bytes"] = io.write_io.full_chunk_bytes
        if io.read_io is not None and io.read_known:
            extra["read_iops_p99"] = io.read_io.p99_iops
            extra["read_iops_mean"] = io.read_io.mean_iops
    facts = workload_facts(
        report.trace,
        model,
        split,
        pc,
        io,
        chunk_tokens=chunk_tokens,
        extra=extra,
    )
    if io is not None and not io.read_known:
        for name in READ_FACTS:
            facts.pop(name, None)
    return facts
