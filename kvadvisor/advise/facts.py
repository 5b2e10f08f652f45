"""The facts registry (every named number rules may read) and the pure functions that compute them.

Facts come in two kinds. *Workload facts* are measured from the trace and its analysis (the
report's trace, model, stage split, prefix cache and I/O sections, plus the cache engine's and the
stage profiler's richer results where present). *Configuration facts* describe a candidate
deployment (instance, storage tier, capacity) against that workload; the advisor computes them.
A fact the analysis could not produce is absent, never zero: rules that need it stay quiet and
say so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from kvadvisor.advise.model import IoDemand, ModelSummary, PrefixCache, StageSplit, TraceSummary
from kvadvisor.rules.model import FactSpec, FactValue
from kvadvisor.units import BYTES_PER_GIB

# Share of the unbounded hit ratio that defines the working set: the smallest cache that keeps
# 90% of the reuse a cache of unlimited size would get (the knee most capacity planners use).
WORKING_SET_HIT_SHARE = 0.9

_T, _M, _S, _C, _IO, _P, _CFG = (
    "trace",
    "model",
    "stage profiler",
    "cache engine",
    "stage profiler (I/O demand)",
    "stage profiler (performance model)",
    "advisor (chosen configuration)",
)

FACT_SPECS: tuple[FactSpec, ...] = (
    # -- trace --------------------------------------------------------------------------
    FactSpec("requests_count", "requests", "Requests in the trace.", _T),
    FactSpec("trace_duration_s", "s", "Time from the first to the last arrival.", _T),
    FactSpec("arrival_rate_per_s", "per_s", "Mean arrival rate: requests / duration.", _T),
    FactSpec("input_tokens_mean", "tokens", "Mean prompt length: Σ input tokens / requests.", _T),
    FactSpec("output_tokens_mean", "tokens", "Mean output length: Σ output tokens / requests.", _T),
    FactSpec(
        "output_to_input_tokens_ratio",
        "x",
        "Σ output tokens / Σ input tokens; small means prompt-heavy traffic.",
        _T,
    ),
    FactSpec(
        "prefix_reuse_measurable",
        "bool",
        "Whether the trace carries prefix block hashes, so reuse can be measured.",
        _T,
    ),
    FactSpec("block_tokens", "tokens", "Tokens per prefix hash block in the trace.", _T),
    # -- model --------------------------------------------------------------------------
    FactSpec(
        "kv_bytes_per_token",
        "bytes",
        "KV bytes per token: GQA 2 × layers × kv_heads × head_dim × dtype bytes; MLA "
        "layers × (kv_lora_rank + qk_rope_head_dim) × dtype bytes.",
        _M,
    ),
    FactSpec("model_weights_gib", "gib", "Model weights at the serving dtype.", _M),
    # -- stage split ---------------------------------------------------------------------
    FactSpec(
        "prefill_gpu_s", "s", "Prefill GPU time summed over the trace (model-replica seconds).", _S
    ),
    FactSpec(
        "decode_gpu_s",
        "s",
        "Decode GPU time summed over the trace (model-replica seconds; each request charged "
        "its share of every batched step).",
        _S,
    ),
    FactSpec(
        "prefill_share_gpu_time", "ratio", "prefill_gpu_s / (prefill_gpu_s + decode_gpu_s).", _S
    ),
    FactSpec("decode_share_gpu_time", "ratio", "1 − prefill_share_gpu_time.", _S),
    FactSpec("prefill_to_decode_gpu_time_ratio", "x", "prefill_gpu_s / decode_gpu_s.", _S),
    FactSpec(
        "split_gpu_bf16_tflops",
        "tflops",
        "Dense BF16 TFLOPS of the GPU the stage split was modeled on (to rescale prefill "
        "time to another GPU).",
        _S,
    ),
    FactSpec(
        "split_gpu_memory_bandwidth_gbps",
        "gbps",
        "Memory bandwidth of the GPU the stage split was modeled on (to rescale decode time).",
        _S,
    ),
    FactSpec(
        "busy_gpus_mean",
        "count",
        "(prefill_gpu_s + decode_gpu_s) × split_gpus_per_replica / trace_duration_s: GPUs "
        "kept busy on average, on the GPU the split was computed for.",
        _S,
    ),
    # -- prefix cache --------------------------------------------------------------------
    FactSpec(
        "prefix_hit_ratio_unbounded",
        "ratio",
        "Token hit ratio over all requests with an unbounded LRU prefix cache "
        "(DESIGN.md's prefix-hit definition).",
        _C,
    ),
    FactSpec(
        "prefix_hit_ratio_steady",
        "ratio",
        "Token hit ratio at unbounded capacity after the warm-up (steady state).",
        _C,
    ),
    FactSpec(
        "kv_working_set_tokens",
        "tokens",
        "Smallest capacity on the hit-ratio curve whose steady hit ratio reaches "
        "90% of the unbounded one.",
        _C,
    ),
    FactSpec(
        "kv_working_set_gib", "gib", "kv_working_set_tokens × kv_bytes_per_token, in GiB.", _C
    ),
    FactSpec(
        "prefix_hit_ratio_at_gpu_pool",
        "ratio",
        "Steady hit ratio of a cache the size of the GPU KV pool of the prefill "
        "instances (the largest curve point not above that size: a lower bound).",
        _CFG,
    ),
    FactSpec(
        "prefix_hit_ratio_at_host_pool",
        "ratio",
        "Steady hit ratio once the host DRAM tier is added (inclusive tiers: the curve at "
        "the host pool size).",
        _CFG,
    ),
    FactSpec("reuse_time_p50_s", "s", "Median time between a block's reuse and its last use.", _C),
    FactSpec("reuse_time_p90_s", "s", "90th percentile of reuse times.", _C),
    FactSpec("retention_ttl_s", "s", "Retention (TTL) that keeps 90% of the hits.", _C),
    FactSpec("retention_capacity_gib", "gib", "Capacity needed to keep blocks for the TTL.", _C),
    # -- I/O demand ----------------------------------------------------------------------
    FactSpec("io_window_s", "s", "Window length of the I/O demand time series.", _IO),
    FactSpec(
        "write_bytes_per_s_mean",
        "bytes_per_s",
        "Mean KV write demand: bytes of missed prompt tokens per second (all instances).",
        _IO,
    ),
    FactSpec(
        "write_bytes_per_s_p99", "bytes_per_s", "99th percentile of windowed write demand.", _IO
    ),
    FactSpec("write_bytes_per_s_peak", "bytes_per_s", "Highest windowed write demand.", _IO),
    FactSpec("write_peak_to_mean", "x", "write_bytes_per_s_peak / write_bytes_per_s_mean.", _IO),
    FactSpec("write_p99_to_mean", "x", "write_bytes_per_s_p99 / write_bytes_per_s_mean.", _IO),
    FactSpec(
        "read_bytes_per_s_mean",
        "bytes_per_s",
        "Mean KV read demand: bytes of hit tokens loaded per second (all instances).",
        _IO,
    ),
    FactSpec(
        "read_bytes_per_s_p99", "bytes_per_s", "99th percentile of windowed read demand.", _IO
    ),
    FactSpec("read_bytes_per_s_peak", "bytes_per_s", "Highest windowed read demand.", _IO),
    FactSpec("read_peak_to_mean", "x", "read_bytes_per_s_peak / read_bytes_per_s_mean.", _IO),
    FactSpec(
        "chunk_tokens",
        "tokens",
        "Tokens per KV chunk moved to or from a tier (--chunk-tokens; LMCache's default is 256).",
        _IO,
    ),
    FactSpec(
        "io_size_bytes", "bytes", "Bytes per chunk I/O: chunk_tokens × kv_bytes_per_token.", _IO
    ),
    FactSpec("write_iops_p99", "per_s", "write_bytes_per_s_p99 / io_size_bytes.", _IO),
    FactSpec("decode_read_iops_mean", "per_s", "read_bytes_per_s_mean / io_size_bytes.", _IO),
    FactSpec("decode_read_iops_p99", "per_s", "read_bytes_per_s_p99 / io_size_bytes.", _IO),
    FactSpec(
        "breakeven_prefix_tokens",
        "tokens",
        "Prefix length above which loading KV from the decode tier beats recomputing it "
        "(the profiler's reference tier of the same class).",
        _P,
    ),
    FactSpec(
        "hit_tokens_below_breakeven_share",
        "ratio",
        "Share of hit tokens in prefixes shorter than breakeven_prefix_tokens.",
        _P,
    ),
    FactSpec(
        "max_concurrent_requests_fit",
        "requests",
        "Requests of mean context whose KV fits the modeled replica's GPU memory.",
        _P,
    ),
    FactSpec(
        "inflight_requests_p99",
        "requests",
        "99th percentile over windows of the requests in flight (arrival to completion) per "
        "modeled instance.",
        _P,
    ),
    FactSpec(
        "kv_inflight_gib_p99",
        "gib",
        "KV of inflight_requests_p99 requests of mean context, in GiB.",
        _P,
    ),
    FactSpec(
        "kv_inflight_gib_p99_per_instance",
        "gib",
        "kv_inflight_gib_p99 × modeled instances / decode_instance_count: the in-flight KV "
        "one recommended decode instance holds.",
        _CFG,
    ),
    FactSpec(
        "split_instances",
        "count",
        "Model instances the stage profiler spread the trace's load over.",
        _S,
    ),
    FactSpec(
        "split_gpus_per_replica",
        "count",
        "GPUs per model replica (tensor parallelism) the stage split was computed with.",
        _S,
    ),
    # -- configuration -------------------------------------------------------------------
    FactSpec(
        "shared_storage_spec",
        "bool",
        "Whether one storage specification serves both stages (--storage).",
        _CFG,
    ),
    FactSpec("prefill_instance_count", "count", "Prefill instances in the recommendation.", _CFG),
    FactSpec("decode_instance_count", "count", "Decode instances in the recommendation.", _CFG),
    FactSpec("gpu_memory_total_gib", "gib", "GPU memory of one prefill instance (all GPUs).", _CFG),
    FactSpec(
        "gpu_kv_pool_gib",
        "gib",
        "GPU memory left for KV on one prefill instance: 90% of GPU memory minus weights.",
        _CFG,
    ),
    FactSpec("host_memory_gib", "gib", "Host DRAM of one prefill instance.", _CFG),
    FactSpec("host_kv_pool_gib", "gib", "Host DRAM KV tier on one prefill instance.", _CFG),
    FactSpec("prefill_gpu_bf16_tflops", "tflops", "Dense BF16 TFLOPS of one prefill GPU.", _CFG),
    FactSpec("decode_gpu_bf16_tflops", "tflops", "Dense BF16 TFLOPS of one decode GPU.", _CFG),
    FactSpec(
        "prefill_gpu_memory_bandwidth_gbps", "gbps", "HBM bandwidth of one prefill GPU.", _CFG
    ),
    FactSpec("decode_gpu_memory_bandwidth_gbps", "gbps", "HBM bandwidth of one decode GPU.", _CFG),
    FactSpec(
        "prefill_storage_write_bytes_per_s",
        "bytes_per_s",
        "Write bandwidth of the prefill KV tier on one instance.",
        _CFG,
    ),
    FactSpec(
        "prefill_write_bytes_per_s_p99_per_instance",
        "bytes_per_s",
        "write_bytes_per_s_p99 / prefill_instance_count.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_write_utilization_mean",
        "ratio",
        "Mean write demand per instance / the tier's write bandwidth.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_write_utilization_p99",
        "ratio",
        "p99 write demand per instance / the tier's write bandwidth.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_write_utilization_peak",
        "ratio",
        "Peak write demand per instance / the tier's write bandwidth.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_io_unit_bytes",
        "bytes",
        "The prefill tier's I/O unit (page, block or stripe).",
        _CFG,
    ),
    FactSpec(
        "write_amplification_ratio",
        "x",
        "Bytes the device writes per KV byte: ceil(io_size / unit) × unit / io_size.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_gds", "bool", "Whether the prefill tier supports GPUDirect Storage.", _CFG
    ),
    FactSpec(
        "prefill_disk_cap_bytes_per_s",
        "bytes_per_s",
        "The prefill instance's cap on attached cloud-disk bandwidth.",
        _CFG,
    ),
    FactSpec(
        "prefill_disk_cap_utilization_p99",
        "ratio",
        "p99 write demand per instance / the instance's disk-bandwidth cap.",
        _CFG,
    ),
    FactSpec(
        "ssd_drive_writes_per_day",
        "dwpd",
        "Mean write demand per instance × 86,400 s / the SSD tier's capacity.",
        _CFG,
    ),
    FactSpec(
        "decode_storage_read_bytes_per_s",
        "bytes_per_s",
        "Read bandwidth of the decode KV tier on one instance.",
        _CFG,
    ),
    FactSpec("decode_storage_read_iops", "per_s", "Read IOPS of the decode KV tier.", _CFG),
    FactSpec("decode_storage_read_latency_us", "us", "Read latency of the decode KV tier.", _CFG),
    FactSpec(
        "decode_read_iops_p99_per_instance",
        "per_s",
        "decode_read_iops_p99 / decode_instance_count.",
        _CFG,
    ),
    FactSpec(
        "decode_storage_read_utilization_mean",
        "ratio",
        "Mean read demand per instance / the tier's capability (the larger of the bandwidth "
        "and IOPS shares).",
        _CFG,
    ),
    FactSpec(
        "decode_storage_read_utilization_p99",
        "ratio",
        "p99 read demand per instance / the tier's capability.",
        _CFG,
    ),
    FactSpec(
        "decode_storage_read_utilization_peak",
        "ratio",
        "Peak read demand per instance / the tier's capability.",
        _CFG,
    ),
    FactSpec(
        "decode_storage_gds", "bool", "Whether the decode tier supports GPUDirect Storage.", _CFG
    ),
)

FACTS: dict[str, FactSpec] = {f.name: f for f in FACT_SPECS}


def fact(name: str, value: float | int | bool | None) -> FactValue | None:
    """A FactValue for a registered name, or None for a missing or non-finite value."""
    spec = FACTS[name]  # a KeyError here is a bug: every produced fact must be registered
    if value is None:
        return None
    if not isinstance(value, bool) and not math.isfinite(float(value)):
        return None
    return FactValue(name, value, spec.unit)


def collect(pairs: Iterable[tuple[str, Any]]) -> dict[str, FactValue]:
    """Build a facts mapping, dropping the unavailable ones."""
    out: dict[str, FactValue] = {}
    for name, value in pairs:
        made = fact(name, value)
        if made is not None:
            out[name] = made
    return out


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
    for series in getattr(prefix_cache, "curve", ()) or ():
        if "steady" in series.name and series.x_unit == "tokens":
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
    gpus_per_replica: int = 1,
    extra: Mapping[str, float | int | bool | None] | None = None,
) -> dict[str, FactValue]:
    """Facts measured from the analysis results (pure).

    ``stage_split`` counts GPU-seconds (a replica's seconds × ``gpus_per_replica``,
    docs/stage-profiler.md); the ``*_gpu_s`` facts count model-replica seconds. ``extra``
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
            ("prefill_gpu_s", stage_split.prefill_s / gpus_per_replica),
            ("decode_gpu_s", stage_split.decode_s / gpus_per_replica),
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
            ("decode_read_iops_mean", div(r.mean_bytes_per_s, io_size)),
            ("decode_read_iops_p99", div(r.p99_bytes_per_s, io_size)),
        ]
    elif kv:
        pairs.append(("io_size_bytes", chunk_tokens * kv))
    pairs += list((extra or {}).items())
    return collect(pairs)


def render_facts_doc() -> str:
    """docs/facts.md: every fact with its unit, meaning and producer (generated; do not edit)."""
    from kvadvisor.rules.model import UNITS

    lines = [
        "# Facts",
        "",
        "<!-- Generated by `kvadvisor rules facts --markdown` from kvadvisor/advise/facts.py;"
        " do not edit. -->",
        "",
        "Facts are the named numbers the analysis produces and rules read. A fact the analysis"
        " could not produce is absent (never zero); a rule that needs it stays quiet and the"
        " report says `not evaluated: fact X unavailable`.",
        "",
        "| fact | unit | meaning | produced by |",
        "|---|---|---|---|",
    ]
    for spec in FACT_SPECS:
        lines.append(f"| `{spec.name}` | {spec.unit} | {spec.description} | {spec.source} |")
    lines += ["", "## Units", "", "| unit | meaning |", "|---|---|"]
    lines += [f"| {u} | {meaning} |" for u, meaning in UNITS.items()]
    return "\n".join(lines) + "\n"


def _get(obj: Any, *names: str) -> Any:
    """Follow attributes that later producers add (None where a section or field is absent)."""
    for name in names:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def report_facts(report: Any, *, chunk_tokens: int = 256) -> dict[str, FactValue]:
    """Every workload fact the report's sections support (pure).

    Reads the contract sections (trace, model, stage_split, prefix_cache, io) and, where the
    cache engine and the stage profiler attached them, their richer results: reuse times and
    TTLs, the whole hit-ratio curve, memory fit, I/O counts at the chunk size.
    """
    extra: dict[str, Any] = {}
    pc, model, io, split = report.prefix_cache, report.model, report.io, report.stage_split
    kv = model.kv_bytes_per_token if model is not None else None
    if pc is not None:
        if getattr(pc, "status", "") == "unknown" or pc.hit_ratio.all is None:
            extra["prefix_reuse_measurable"] = False
        for q in _get(pc, "reuse", "quantiles") or ():
            if q.quantile in (0.5, 0.9):
                extra[f"reuse_time_p{round(q.quantile * 100)}_s"] = q.seconds
        for t in _get(pc, "reuse", "ttl") or ():
            if t.share == WORKING_SET_HIT_SHARE:
                extra["retention_ttl_s"] = t.ttl_s
                if kv:
                    extra["retention_capacity_gib"] = t.capacity_tokens * kv / BYTES_PER_GIB
    tp = _get(model, "deployment", "tp") or 1
    memory = _get(model, "memory")
    if memory is not None:
        extra["model_weights_gib"] = memory.weight_bytes_per_gpu * tp / BYTES_PER_GIB
        extra["max_concurrent_requests_fit"] = memory.max_concurrent_requests
    if split is not None:
        extra["split_gpus_per_replica"] = tp
        extra["split_instances"] = getattr(split, "instances", 1)
    if io is not None:
        chunk_tokens = getattr(io, "chunk_tokens", None) or chunk_tokens
        write_io, read_io = getattr(io, "write_io", None), getattr(io, "read_io", None)
        if write_io is not None:
            extra["write_iops_p99"] = write_io.p99_iops
            extra["io_size_bytes"] = write_io.full_chunk_bytes
        if read_io is not None and getattr(io, "read_known", True):
            extra["decode_read_iops_p99"] = read_io.p99_iops
            extra["decode_read_iops_mean"] = read_io.mean_iops
    facts = workload_facts(
        report.trace,
        model,
        split,
        pc,
        io,
        chunk_tokens=chunk_tokens,
        gpus_per_replica=tp,
        extra=extra,
    )
    if io is not None and not getattr(io, "read_known", True):
        for name in [n for n in facts if n.startswith(("read_", "decode_read_"))]:
            del facts[name]
    return facts
