"""A tier's demand to reproduce: rates over windows, burst phases, queue depth, latency target.

Definitions (docs/verify.md gives them in words):

* **Series** (closed loop): the fleet replay's bytes per window on the tier's busiest unit (a
  replica, an instance or the pool, by the p99 of read plus write), with batching, queues and
  shared bandwidth deciding when KV moves; its mean, p99 and peak are the replay's figures.
  **Open loop**, when the replay cannot run the plan: the review's demand per window
  (``window_rates`` over the same flows the review judges), per instance for node-local tiers
  and per pool for shared ones; its mean, p99 and peak are the review's figures.
* **Burst profile**: a window is *on* when its demand is above the series mean. The on rate is
  the mean over on windows, the off rate the mean over off windows, and ``on_s``/``off_s`` the
  mean lengths of runs of consecutive on and off windows. A series with no off window (steady)
  or no demand has no burst profile.
* **Queue depth**: requests moving KV on the tier at once, the p99 over windows of the mean
  number in flight; each keeps one chunk I/O outstanding per rank. Closed loop: the replayed
  requests on the busiest unit, a prefilling one from admission to its first token, a decoding
  one from admission to completion. Open loop: per instance, a prefill tier's requests during
  their modeled prefill, a decode tier's during their decode (:mod:`kvadvisor.metrics.stages`
  with the plan's model, GPU and instance count); without a catalog model and GPU, 1.
* **Latency target** (prefill reads, when the plan sets a TTFT SLO): the p99 request loads
  ``n`` I/Os per rank from the tier, ``q`` at a time, so each may take ``SLO × q / n`` for the
  load alone to fit the SLO.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.metrics.stages import stage_times
from kvadvisor.metrics.timeline import inflight_window_means, window_count
from kvadvisor.perfmodel import PerfModel, memory_fit
from kvadvisor.perfmodel.transfer import engine_share
from kvadvisor.plan.model import Plan, StagePlan, StorageCapability
from kvadvisor.planreview.demand import TierCalc, window_rates
from kvadvisor.units import Unit, format_value, plural
from kvadvisor.units.format import duration
from kvadvisor.verifyjobs.model import (
    BurstProfile,
    DirectionDemand,
    IoShape,
    ReplayedTier,
    TierDemand,
)
from kvadvisor.verifyjobs.shape import gds_support, io_shape

# Tier kinds fio has no file or block device for: memory is the host-GPU copy path, a KV pool
# or an object store speak their own protocol. The serving benchmark covers them.
NO_FIO_KINDS = {
    "dram": "host memory: its bandwidth is the host-GPU copy path, not a device fio can open",
    "cxl": "CXL memory: a memory tier, not a device fio can open",
    "pool": "a KV pool (Mooncake Store, 3FS KV...) speaks its own protocol, not files",
    "object": "an object store: no file or block device for fio",
}


def burst_profile(series: np.ndarray, window_s: float) -> BurstProfile | None:
    """On/off phases of a per-window rate series (see the module docstring)."""
    series = np.asarray(series, dtype=np.float64)
    mean = float(series.mean()) if series.size else 0.0
    if mean <= 0:
        return None
    on = series > mean
    if on.all() or not on.any():
        return None
    starts = np.r_[0, np.flatnonzero(np.diff(on.astype(np.int8))) + 1]
    lengths = np.diff(np.r_[starts, on.size])
    states = on[starts]
    return BurstProfile(
        on_bytes_per_s=float(series[on].mean()),
        off_bytes_per_s=float(series[~on].mean()),
        on_s=float(lengths[states].mean() * window_s),
        off_s=float(lengths[~states].mean() * window_s),
        on_fraction=float(on.mean()),
        threshold_bytes_per_s=mean,
    )


def stage_inflight(
    plan: Plan,
    stage: StagePlan,
    times_s: np.ndarray,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    hit_tokens: np.ndarray | None,
    window_s: float,
    span_s: float,
) -> tuple[np.ndarray | None, str]:
    """Mean requests in this stage's interval per window, whole fleet; None without a model."""
    m = plan.model
    if m.spec is None or stage.gpu is None:
        return None, (
            "queue depth 1: the plan names no catalog model and GPU for this stage, so "
            "concurrency cannot be modeled"
        )
    # The catalogs the plan was checked against: a user's GPU keeps its own coefficients.
    pm = PerfModel.build(
        m.spec,
        stage.gpu,
        tp=m.tp,
        kv_dtype=m.kv_dtype,
        weight_dtype=m.weight_dtype,
        catalogs=plan.catalogs,
    )
    context = input_tokens + output_tokens
    max_batch = memory_fit(pm, float(np.mean(context)) if context.size else 1.0)
    st = stage_times(
        times_s,
        input_tokens.astype(np.float64),
        output_tokens.astype(np.float64),
        pm,
        hit_tokens=hit_tokens,
        instances=stage.count,
        max_batch=max(max_batch.max_concurrent_requests, 1.0),
    )
    windows = window_count(span_s, window_s)
    if stage.prefills:
        lo, hi, what = st.prefill_start_s, st.prefill_end_s, "in prefill"
    else:
        lo, hi, what = st.prefill_end_s, st.end_s, "in decode"
    return inflight_window_means(lo, hi, window_s, windows), (
        f"p99 over {duration(window_s)} windows of requests {what} at once (open-loop stage "
        f"model: {m.spec.display_name} on {stage.gpu.display_name}, TP {m.tp}, "
        f"{plural(stage.count, 'instance')}); one chunk I/O outstanding per request per rank"
    )


def _direction(
    direction: str,
    series: np.ndarray,
    tokens: np.ndarray | None,
    shape: IoShape,
    window_s: float,
    iodepth: int,
    ttft_slo_s: float | None,
    prefills: bool,
) -> DirectionDemand | None:
    """One direction's demand from its per-window series (bytes per second)."""
    if not series.size or series.max() <= 0:
        return None
    moving = np.zeros(0) if tokens is None else tokens[tokens > 0]
    ios = np.ceil(moving / shape.chunk_tokens) * shape.pieces_per_chunk
    ios_p99 = float(np.percentile(ios, 99)) if ios.size else 0.0
    target, target_from = (
        None,
        (
            "writes are off the first token's path: what must hold is bandwidth"
            if direction == "write"
            else "no TTFT SLO in the plan"
        ),
    )
    if direction == "read" and prefills and ttft_slo_s is not None and ios_p99 > 0:
        target = ttft_slo_s * iodepth / ios_p99
        target_from = (
            f"TTFT p99 SLO {format_value(ttft_slo_s, Unit.SECONDS)} × queue depth {iodepth} / "
            f"{format_value(ios_p99, Unit.COUNT)} I/Os per rank of the p99 request: the load "
            "alone fits the SLO"
        )
    return DirectionDemand(
        direction=direction,
        mean_bytes_per_s=float(series.mean()),
        p99_bytes_per_s=float(np.percentile(series, 99)),
        peak_bytes_per_s=float(series.max()),
        burst=burst_profile(series, window_s),
        ios_per_request_p99=ios_p99,
        latency_target_s=target,
        latency_target_from=target_from,
    )


def _device_limits(storage: StorageCapability) -> dict[str, float]:
    """One device's rated figures (the plan's, per device or volume), those it states."""
    figures = {
        "read_bytes_per_s": storage.read_bytes_per_s,
        "write_bytes_per_s": storage.write_bytes_per_s,
        "read_iops": storage.read_iops,
        "write_iops": storage.write_iops,
    }
    return {k: float(v) for k, v in figures.items() if v}


def _depth(inflight: np.ndarray) -> int:
    """The p99 over windows of requests in flight, rounded up, at least 1."""
    if not inflight.size:
        return 1
    return max(int(math.ceil(float(np.percentile(inflight, 99)) - 1e-9)), 1)


def tier_demands(
    plan: Plan,
    flows: Mapping[str, Sequence[TierCalc]],
    times_s: np.ndarray,
    span_s: float,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    kv_bytes_per_token: float,
    specs: Mapping[str, StorageSpec],
    window_s: float,
    replayed: Mapping[tuple[str, str], ReplayedTier] | None = None,
) -> tuple[TierDemand, ...]:
    """Every tier's demand, shape and queue depth (pure).

    A tier in ``replayed`` (the closed-loop replay of the plan) takes its demand over time,
    queue depth and served tokens from there; the others from the open-loop flows.
    """
    replayed = replayed or {}
    out: list[TierDemand] = []
    for stage in plan.stages:
        own = flows.get(stage.stage, ())
        served = [f.served_tokens for f in own if f.served_tokens is not None]
        hits = np.sum(served, axis=0) if served else None
        open_inflight: tuple[np.ndarray | None, str] | None = None
        for f in own:
            t = f.plan
            spec = specs.get(t.storage.catalog_name) if t.storage.catalog_name else None
            shape = io_shape(plan, stage, t, kv_bytes_per_token, spec)
            gds, gds_from = gds_support(t, specs)
            closed = replayed.get((stage.stage, t.name))
            if closed is not None:
                win = closed.window_s
                read_series = closed.read_bytes_per_s if stage.prefills else np.zeros(0)
                write_series = closed.write_bytes_per_s
                read_tokens, write_tokens = closed.served_tokens, None
                depth, depth_from = _depth(closed.inflight), closed.inflight_from
                demand_from = closed.source
            else:
                if open_inflight is None:
                    open_inflight = stage_inflight(
                        plan, stage, times_s, input_tokens, output_tokens, hits, window_s, span_s
                    )
                inflight, depth_from = open_inflight
                fleet = f.fleet if f.fleet else 1
                depth = 1 if inflight is None else _depth(inflight / fleet)
                win = window_s
                read_tokens, write_tokens = f.served_tokens, f.written_tokens
                read_series = (
                    np.zeros(0)
                    if read_tokens is None
                    else window_rates(
                        times_s, read_tokens * kv_bytes_per_token / fleet, win, span_s
                    )
                )
                write_series = window_rates(
                    times_s, write_tokens * kv_bytes_per_token / fleet, win, span_s
                )
                demand_from = (
                    "open loop: the review's flows at arrival time (no closed-loop replay)"
                )
            open_loop: dict[str, tuple[float, float]] = {}
            if closed is not None:
                for name, rate in (("read", f.review.read), ("write", f.review.write)):
                    if rate is not None and rate.peak_bytes_per_s > 0:
                        open_loop[name] = (rate.p99_bytes_per_s, rate.peak_bytes_per_s)
            # What the replay holds the tier to: its rated figure at the engine's share.
            share, _ = engine_share(
                t.storage.kind, t.efficiency, t.storage.measured, t.storage.catalog_name
            )
            capability = {
                k: v * share
                for k, v in (
                    ("read", f.review.read_capability_bytes_per_s),
                    ("write", f.review.write_capability_bytes_per_s),
                )
                if v
            }
            args = (shape, win, depth, plan.slo.ttft_p99_s, stage.prefills)
            read = _direction("read", read_series, read_tokens, *args)
            write = _direction("write", write_series, write_tokens, *args)
            skipped = NO_FIO_KINDS.get(t.storage.kind)
            if skipped is None and read is None and write is None:
                skipped = "no KV traffic reaches this tier in the replay"
            out.append(
                TierDemand(
                    stage=stage.stage,
                    tier=t.name,
                    kind=t.storage.kind,
                    shared=t.shared,
                    devices=t.devices,
                    catalog_name=t.storage.catalog_name,
                    gds=gds,
                    gds_from=gds_from,
                    shape=shape,
                    read=read,
                    write=write,
                    iodepth=depth,
                    iodepth_from=depth_from,
                    window_s=win,
                    skipped=skipped,
                    demand_from=demand_from,
                    open_loop=open_loop,
                    capability_bytes_per_s=capability,
                    device_limits=_device_limits(t.storage),
                    device_limits_from=(
                        f"catalog entry {t.storage.catalog_name}"
                        if t.storage.catalog_name
                        else "the plan's inline storage figures"
                    ),
                )
            )
    return tuple(out)
