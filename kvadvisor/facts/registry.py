"""The facts registry: every named number rules may read, with its unit, meaning and producer.

Facts come in two kinds. *Workload facts* are measured from the trace and its analysis (the
report's trace, model, stage split, prefix cache and I/O sections, plus the cache engine's and the
stage profiler's richer results where present). *Configuration facts* describe a candidate
deployment (instance, storage tier, capacity) against that workload; the advisor computes them.
A fact the analysis could not produce is absent, never zero: rules that need it stay quiet and
say so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from kvadvisor.engines import registry as engines
from kvadvisor.facts.review import REVIEW_FACT_SPECS
from kvadvisor.rules.model import FactSpec, FactValue
from kvadvisor.units import Unit

_T, _M, _S, _C, _IO, _P, _CFG = (
    "trace",
    "model",
    "stage profiler",
    "cache engine",
    "stage profiler (I/O demand)",
    "stage profiler (performance model)",
    "advisor (chosen configuration)",
)

WORKLOAD_FACT_SPECS: tuple[FactSpec, ...] = (
    # -- trace --------------------------------------------------------------------------
    FactSpec("requests_count", Unit.REQUESTS, "Requests in the trace.", _T),
    FactSpec("trace_duration_s", Unit.SECONDS, "Time from the first to the last arrival.", _T),
    FactSpec("arrival_rate_per_s", Unit.PER_S, "Mean arrival rate: requests / duration.", _T),
    FactSpec(
        "input_tokens_mean", Unit.TOKENS, "Mean prompt length: Σ input tokens / requests.", _T
    ),
    FactSpec(
        "output_tokens_mean", Unit.TOKENS, "Mean output length: Σ output tokens / requests.", _T
    ),
    FactSpec(
        "output_to_input_tokens_ratio",
        Unit.MULTIPLE,
        "Σ output tokens / Σ input tokens; small means prompt-heavy traffic.",
        _T,
    ),
    FactSpec(
        "prefix_reuse_measurable",
        Unit.BOOL,
        "Whether the trace carries prefix block hashes, so reuse can be measured.",
        _T,
    ),
    FactSpec("block_tokens", Unit.TOKENS, "Tokens per prefix hash block in the trace.", _T),
    # -- model --------------------------------------------------------------------------
    FactSpec(
        "kv_bytes_per_token",
        Unit.BYTES,
        "KV bytes per token: GQA 2 × layers × kv_heads × head_dim × dtype bytes; MLA "
        "layers × (kv_lora_rank + qk_rope_head_dim) × dtype bytes.",
        _M,
    ),
    FactSpec("model_weights_gib", Unit.GIB, "Model weights at the serving dtype.", _M),
    # -- stage split ---------------------------------------------------------------------
    FactSpec(
        "prefill_gpu_s",
        Unit.SECONDS,
        "Prefill GPU time summed over the trace, in GPU-seconds (a replica's seconds × its "
        "GPUs): the report's stage_split.prefill_s.",
        _S,
    ),
    FactSpec(
        "decode_gpu_s",
        Unit.SECONDS,
        "Decode GPU time summed over the trace, in GPU-seconds (each request charged its share "
        "of every batched step): the report's stage_split.decode_s.",
        _S,
    ),
    FactSpec(
        "prefill_share_gpu_time", Unit.RATIO, "prefill_gpu_s / (prefill_gpu_s + decode_gpu_s).", _S
    ),
    FactSpec("decode_share_gpu_time", Unit.RATIO, "1 − prefill_share_gpu_time.", _S),
    FactSpec(
        "prefill_to_decode_gpu_time_ratio", Unit.MULTIPLE, "prefill_gpu_s / decode_gpu_s.", _S
    ),
    FactSpec(
        "split_gpu_bf16_tflops",
        Unit.TFLOPS,
        "Dense BF16 TFLOPS of the GPU the stage split was modeled on (to rescale prefill "
        "time to another GPU).",
        _S,
    ),
    FactSpec(
        "split_gpu_memory_bandwidth_gbps",
        Unit.GBPS,
        "Memory bandwidth of the GPU the stage split was modeled on (to rescale decode time).",
        _S,
    ),
    FactSpec(
        "busy_gpus_mean",
        Unit.COUNT,
        "(prefill_gpu_s + decode_gpu_s) / trace_duration_s: GPUs kept busy on average, on the "
        "GPU the split was computed for.",
        _S,
    ),
    # -- prefix cache --------------------------------------------------------------------
    FactSpec(
        "prefix_hit_ratio_unbounded",
        Unit.RATIO,
        "Token hit ratio over all requests with an unbounded LRU prefix cache "
        "(the prefix-hit definition: `kvadvisor docs cache#prefix-hit`).",
        _C,
    ),
    FactSpec(
        "prefix_hit_ratio_steady",
        Unit.RATIO,
        "Token hit ratio at unbounded capacity after the warm-up (steady state).",
        _C,
    ),
    FactSpec(
        "kv_working_set_tokens",
        Unit.TOKENS,
        "Smallest capacity on the hit-ratio curve whose steady hit ratio reaches "
        "90% of the unbounded one.",
        _C,
    ),
    FactSpec(
        "kv_working_set_gib", Unit.GIB, "kv_working_set_tokens × kv_bytes_per_token, in GiB.", _C
    ),
    FactSpec(
        "prefix_hit_ratio_at_gpu_pool",
        Unit.RATIO,
        "Steady hit ratio of a cache the size of the GPU KV pool of the prefill "
        "instances (the largest curve point not above that size: a lower bound).",
        _CFG,
    ),
    FactSpec(
        "prefix_hit_ratio_at_host_pool",
        Unit.RATIO,
        "Steady hit ratio once the host DRAM tier is added (inclusive tiers: the curve at "
        "the host pool size).",
        _CFG,
    ),
    FactSpec(
        "reuse_time_p50_s",
        Unit.SECONDS,
        "Median time between a block's reuse and its last use.",
        _C,
    ),
    FactSpec("reuse_time_p90_s", Unit.SECONDS, "90th percentile of reuse times.", _C),
    FactSpec("retention_ttl_s", Unit.SECONDS, "Retention (TTL) that keeps 90% of the hits.", _C),
    FactSpec("retention_capacity_gib", Unit.GIB, "Capacity needed to keep blocks for the TTL.", _C),
    # -- I/O demand ----------------------------------------------------------------------
    FactSpec("io_window_s", Unit.SECONDS, "Window length of the I/O demand time series.", _IO),
    FactSpec(
        "write_bytes_per_s_mean",
        Unit.BYTES_PER_S,
        "Mean KV write demand: bytes of missed prompt tokens per second (all instances).",
        _IO,
    ),
    FactSpec(
        "write_bytes_per_s_p99", Unit.BYTES_PER_S, "99th percentile of windowed write demand.", _IO
    ),
    FactSpec("write_bytes_per_s_peak", Unit.BYTES_PER_S, "Highest windowed write demand.", _IO),
    FactSpec(
        "write_peak_to_mean", Unit.MULTIPLE, "write_bytes_per_s_peak / write_bytes_per_s_mean.", _IO
    ),
    FactSpec(
        "write_p99_to_mean", Unit.MULTIPLE, "write_bytes_per_s_p99 / write_bytes_per_s_mean.", _IO
    ),
    FactSpec(
        "read_bytes_per_s_mean",
        Unit.BYTES_PER_S,
        "Mean KV read demand: bytes of hit tokens loaded per second (all instances).",
        _IO,
    ),
    FactSpec(
        "read_bytes_per_s_p99", Unit.BYTES_PER_S, "99th percentile of windowed read demand.", _IO
    ),
    FactSpec("read_bytes_per_s_peak", Unit.BYTES_PER_S, "Highest windowed read demand.", _IO),
    FactSpec(
        "read_peak_to_mean", Unit.MULTIPLE, "read_bytes_per_s_peak / read_bytes_per_s_mean.", _IO
    ),
    FactSpec(
        "chunk_tokens",
        Unit.TOKENS,
        "Tokens per KV chunk moved to or from a tier (--chunk-tokens; LMCache's default is 256).",
        _IO,
    ),
    FactSpec(
        "io_size_bytes", Unit.BYTES, "Bytes per chunk I/O: chunk_tokens × kv_bytes_per_token.", _IO
    ),
    FactSpec("write_iops_p99", Unit.IOPS, "write_bytes_per_s_p99 / io_size_bytes.", _IO),
    FactSpec(
        "read_iops_mean",
        Unit.IOPS,
        "read_bytes_per_s_mean / io_size_bytes: chunk reads per second of the prefix loads "
        "(all instances).",
        _IO,
    ),
    FactSpec("read_iops_p99", Unit.IOPS, "read_bytes_per_s_p99 / io_size_bytes.", _IO),
    FactSpec(
        "breakeven_prefix_tokens",
        Unit.TOKENS,
        "Prefix length above which loading KV beats recomputing it, for the tier prefix "
        "loads come from: host memory over the GPUs' host link when that is the recommended "
        "deployment's lowest tier, else the profiler's reference NVMe Gen4 x4; absent when the "
        "recommended deployment loads from no tier below the GPU pool.",
        _P,
    ),
    FactSpec(
        "hit_tokens_below_breakeven_share",
        Unit.RATIO,
        "Share of hit tokens in prefixes shorter than breakeven_prefix_tokens.",
        _P,
    ),
    FactSpec(
        "max_concurrent_requests_fit",
        Unit.REQUESTS,
        "Requests of mean context whose KV fits the modeled replica's GPU memory.",
        _P,
    ),
    FactSpec(
        "inflight_requests_p99",
        Unit.REQUESTS,
        "99th percentile over windows of the requests in flight (arrival to completion) per "
        "modeled instance.",
        _P,
    ),
    FactSpec(
        "kv_inflight_gib_p99",
        Unit.GIB,
        "KV of inflight_requests_p99 requests of mean context, in GiB.",
        _P,
    ),
    FactSpec(
        "kv_inflight_gib_p99_per_instance",
        Unit.GIB,
        "kv_inflight_gib_p99 × modeled instances / decode_instance_count: the in-flight KV "
        "one recommended decode instance holds.",
        _CFG,
    ),
    FactSpec(
        "split_instances",
        Unit.COUNT,
        "Model instances the stage profiler spread the trace's load over.",
        _S,
    ),
    FactSpec(
        "split_gpus_per_replica",
        Unit.COUNT,
        "GPUs per model replica (tensor parallelism) the stage split was computed with.",
        _S,
    ),
    # -- configuration -------------------------------------------------------------------
    FactSpec(
        "deployment_chosen",
        Unit.BOOL,
        "Whether the deployment search chose a deployment (the primary verdict): it compared "
        "aggregated and disaggregated fleets on the replay, so advice on topology is its own.",
        _CFG,
    ),
    FactSpec(
        "prefill_instance_count", Unit.COUNT, "Prefill instances in the recommendation.", _CFG
    ),
    # GPUs idling between bursts (docs/advisor.md, "Margin and robustness"): read off the
    # primary verdict's replay on the check set.
    FactSpec(
        "fleet_step_busy_fraction",
        Unit.RATIO,
        "Replica time executing steps over the chosen fleet's replay: Σ (prefill_gpu_s + "
        "decode_gpu_s) charged per request, replica-seconds × GPUs per replica, / (GPUs × the "
        "span from the first arrival to the last completion).",
        _CFG,
    ),
    FactSpec(
        "fleet_occupancy_fraction",
        Unit.RATIO,
        "Replica time holding at least one admitted request (running, or waiting for its KV) "
        "over the chosen fleet's replay, GPU-weighted over the same span as "
        "fleet_step_busy_fraction: at least it; the gap is time replicas wait on loads.",
        _CFG,
    ),
    FactSpec(
        "arrival_peak_to_mean",
        Unit.MULTIPLE,
        "Arrivals in the busiest minute / arrivals in the mean minute of the replayed requests.",
        _CFG,
    ),
    FactSpec("fleet_gpus", Unit.COUNT, "GPUs of the chosen fleet (every stage).", _CFG),
    FactSpec(
        "burst_fleet",
        Unit.TEXT,
        "When the fleet executes steps under 25% of the time: its configuration with the fewest "
        "instances that meets each target at p90 instead (bursts queue), replayed, with its "
        "cost; or why there is none.",
        _CFG,
    ),
    FactSpec("burst_fleet_gpus", Unit.COUNT, "GPUs of that p90 fleet.", _CFG),
    FactSpec(
        "burst_fleet_ttft_p99_s",
        Unit.SECONDS,
        "TTFT p99 of that p90 fleet on the replay: what queueing the bursts costs the tail.",
        _CFG,
    ),
    FactSpec("decode_instance_count", Unit.COUNT, "Decode instances in the recommendation.", _CFG),
    FactSpec(
        "gpu_memory_total_gib", Unit.GIB, "GPU memory of one prefill instance (all GPUs).", _CFG
    ),
    FactSpec(
        "gpu_kv_pool_gib",
        Unit.GIB,
        "GPU memory left for KV on one prefill instance: 90% of GPU memory minus weights.",
        _CFG,
    ),
    FactSpec("host_memory_gib", Unit.GIB, "Host DRAM of one prefill instance.", _CFG),
    FactSpec("host_kv_pool_gib", Unit.GIB, "Host DRAM KV tier on one prefill instance.", _CFG),
    FactSpec(
        "host_kv_pool_fleet_gib",
        Unit.GIB,
        "Host DRAM KV tiers of every prefill instance together: behind the prefix-aware router "
        "each prefix lives on one of them, so the advisor sizes them as one cache.",
        _CFG,
    ),
    FactSpec(
        "stage_gpus_searched",
        Unit.BOOL,
        "Whether the deployment search chose each stage's instance type on the replayed cost "
        "(no --instance pinned one): advice on which GPU serves which stage is then its own.",
        _CFG,
    ),
    FactSpec("prefill_gpu_bf16_tflops", Unit.TFLOPS, "Dense BF16 TFLOPS of one prefill GPU.", _CFG),
    FactSpec("decode_gpu_bf16_tflops", Unit.TFLOPS, "Dense BF16 TFLOPS of one decode GPU.", _CFG),
    FactSpec(
        "prefill_gpu_memory_bandwidth_gbps", Unit.GBPS, "HBM bandwidth of one prefill GPU.", _CFG
    ),
    FactSpec(
        "decode_gpu_memory_bandwidth_gbps", Unit.GBPS, "HBM bandwidth of one decode GPU.", _CFG
    ),
    FactSpec(
        "prefill_storage_write_bytes_per_s",
        Unit.BYTES_PER_S,
        "Write bandwidth of the prefill KV tier on one instance.",
        _CFG,
    ),
    FactSpec(
        "prefill_write_bytes_per_s_p99_per_instance",
        Unit.BYTES_PER_S,
        "write_bytes_per_s_p99 / prefill_instance_count.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_write_utilization_mean",
        Unit.RATIO,
        "Mean write demand per instance / the tier's write bandwidth.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_write_utilization_p99",
        Unit.RATIO,
        "p99 write demand per instance / the tier's write bandwidth.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_write_utilization_peak",
        Unit.RATIO,
        "Peak write demand per instance / the tier's write bandwidth.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_io_unit_bytes",
        Unit.BYTES,
        "The prefill tier's I/O unit (page, block or stripe).",
        _CFG,
    ),
    FactSpec(
        "write_amplification_ratio",
        Unit.MULTIPLE,
        "Bytes the device writes per KV byte: ceil(io_size / unit) × unit / io_size.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_gds",
        Unit.BOOL,
        "Whether the prefill tier supports GPUDirect Storage.",
        _CFG,
    ),
    FactSpec(
        "prefill_disk_cap_bytes_per_s",
        Unit.BYTES_PER_S,
        "The prefill instance's cap on attached cloud-disk bandwidth.",
        _CFG,
    ),
    FactSpec(
        "prefill_disk_cap_utilization_p99",
        Unit.RATIO,
        "p99 write demand per instance / the instance's disk-bandwidth cap.",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_devices_for_peak",
        Unit.COUNT,
        "Devices of the prefill tier that carry its peak write window at full bandwidth: "
        "ceil(devices × write utilization at peak).",
        _CFG,
    ),
    FactSpec(
        "prefill_storage_devices_needed",
        Unit.COUNT,
        "Devices the prefill tier needs as the search sizes it: the larger of those that carry "
        "the p99 writes at 80% (ceil(devices × write utilization at p99 / 0.8)) and those that "
        "hold its capacity at the largest size sold per device.",
        _CFG,
    ),
    FactSpec(
        "ssd_drive_writes_per_day",
        Unit.DWPD,
        "Mean write demand per instance × 86,400 s / the SSD tier's capacity (drives the "
        "user's writes wear: local NVMe and instance-store drives, not cloud block volumes).",
        _CFG,
    ),
    # The tier cached KV is loaded from: prefix hits are loaded before prefill on the nodes
    # that prefill (the prefill stage, or an aggregated fleet's serving stage), so the read
    # side of storage is that stage's; decode reaches storage only through decode-time
    # offload, which the verdict states does not run.
    FactSpec(
        "load_tier_storage",
        Unit.TEXT,
        "The storage option of the tier the recommended deployment loads cached KV from: the "
        "lowest tier of its loading stage (prefill, or aggregated serving) whose replayed "
        "loads read from it.",
        _CFG,
    ),
    FactSpec(
        "load_tier_read_iops",
        Unit.IOPS,
        "Read IOPS one loading node reaches on that tier (catalog figure at its size × "
        "devices, through the instance's disk IOPS cap; a pool's share per node).",
        _CFG,
    ),
    FactSpec(
        "load_tier_read_latency_us",
        Unit.US,
        "Read latency of that tier (the catalog's read latency, else its published latency).",
        _CFG,
    ),
    FactSpec(
        "load_tier_gds",
        Unit.BOOL,
        "Whether that tier documents a GPUDirect Storage path (absent where the catalog does "
        "not say, as for host memory).",
        _CFG,
    ),
    FactSpec(
        "load_read_bytes_per_s_mean",
        Unit.BYTES_PER_S,
        "Mean replayed load demand on that tier per loading node: bytes of the loads started "
        "per window (a pool's per node: / instances of the stage).",
        _CFG,
    ),
    FactSpec(
        "load_read_bytes_per_s_p99",
        Unit.BYTES_PER_S,
        "99th percentile over windows of that replayed load demand per loading node.",
        _CFG,
    ),
    FactSpec(
        "load_read_iops_p99",
        Unit.IOPS,
        "load_read_bytes_per_s_p99 / io_size_bytes: the chunk reads per second one loading "
        "node asks of that tier at p99.",
        _CFG,
    ),
)


def engine_fact_specs() -> tuple[FactSpec, ...]:
    """The facts each registered engine's settings give (``Engine.fact_specs``), in its order."""
    return tuple(spec for e in engines.engines() for spec in e.fact_specs)


# Every fact: the workload's (analyze), the reviewed plan's (kvadvisor.facts.review) and its
# engines' settings (kvadvisor/engines/, as registered when this module is loaded).
FACT_SPECS: tuple[FactSpec, ...] = WORKLOAD_FACT_SPECS + REVIEW_FACT_SPECS + engine_fact_specs()
FACTS: dict[str, FactSpec] = {f.name: f for f in FACT_SPECS}


def fact(name: str, value: float | int | bool | str | None) -> FactValue | None:
    """A FactValue for a registered name, or None for a missing or non-finite value.

    A name not in FACTS may be a fact of an engine registered later (a plug-in's).
    """
    spec = FACTS.get(name) or next((f for f in engine_fact_specs() if f.name == name), None)
    if spec is None:  # a bug: every produced fact must be registered
        raise KeyError(name)
    if value is None:
        return None
    if spec.unit is Unit.TEXT:
        return FactValue(name, str(value), spec.unit)
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
