"""The facts of a reviewed plan, scope by scope: what the review's rules read (pure).

Each scope's :class:`~kvadvisor.planreview.scope.FactSet`: the plan's, each stage's (its engine
settings from :mod:`kvadvisor.planreview.settings`), each tier's; the engines' are in
:mod:`~kvadvisor.planreview.settings`. Names and meanings are registered in
:mod:`kvadvisor.facts.review`; every name below is a literal, so ``grep`` finds where a fact is
made. A fact that cannot be known is absent, with
the reason the review gives for it ("the trace has no block hashes").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvadvisor.deploy import deployment, same_deployment
from kvadvisor.facts.storage import (
    TARGET_TIER_UTILIZATION,
    devices_for,
    devices_for_capacity,
    efficient_io_bytes,
    io_bandwidth_share,
    write_amplification,
)
from kvadvisor.plan.model import DISK_KINDS, Plan, StagePlan, TierPlan
from kvadvisor.planreview.demand import TierCalc, io_rate
from kvadvisor.planreview.scope import FactSet
from kvadvisor.planreview.settings import EngineSettings, settings_facts
from kvadvisor.results.common import IoRate
from kvadvisor.results.review import StageReview
from kvadvisor.units import Unit, format_value
from kvadvisor.vocab import Stage

MEMORY_KINDS = ("dram", "cxl")
NO_HASHES = "prefix reuse unknown: the trace has no block hashes"


@dataclass(frozen=True)
class DirectionFacts:
    """The names of one I/O direction's tier facts, each written out where it is made."""

    bytes_per_s: Mapping[str, str]  # demand by quantile (mean, p99, peak)
    utilization: Mapping[str, str]  # demand / capability by quantile
    capability_bytes_per_s: str
    iops_p99: str
    iops_peak: str
    iops_capability: str


WRITE_FACTS = DirectionFacts(
    bytes_per_s={
        "mean": "tier_write_bytes_per_s_mean",
        "p99": "tier_write_bytes_per_s_p99",
        "peak": "tier_write_bytes_per_s_peak",
    },
    utilization={
        "mean": "tier_write_utilization_mean",
        "p99": "tier_write_utilization_p99",
        "peak": "tier_write_utilization_peak",
    },
    capability_bytes_per_s="tier_write_capability_bytes_per_s",
    iops_p99="tier_write_iops_p99",
    iops_peak="tier_write_iops_peak",
    iops_capability="tier_write_iops_capability",
)
READ_FACTS = DirectionFacts(
    bytes_per_s={
        "mean": "tier_read_bytes_per_s_mean",
        "p99": "tier_read_bytes_per_s_p99",
        "peak": "tier_read_bytes_per_s_peak",
    },
    utilization={
        "mean": "tier_read_utilization_mean",
        "p99": "tier_read_utilization_p99",
        "peak": "tier_read_utilization_peak",
    },
    capability_bytes_per_s="tier_read_capability_bytes_per_s",
    iops_p99="tier_read_iops_p99",
    iops_peak="tier_read_iops_peak",
    iops_capability="tier_read_iops_capability",
)
DIRECTION_FACTS = {"write": WRITE_FACTS, "read": READ_FACTS}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


# -- the plan -----------------------------------------------------------------------------------
def _storage_key(tier: TierPlan) -> tuple[Any, ...]:
    """What makes two tiers the same storage specification (catalog entry or figures)."""
    s = tier.storage
    return (
        s.catalog_name or (s.kind, s.read_bytes_per_s, s.write_bytes_per_s, s.read_iops),
        tier.devices,
        tier.capacity_bytes,
    )


def _storage_tiers(_: StagePlan, calcs: Sequence[TierCalc]) -> list[TierCalc]:
    return [c for c in calcs if c.plan.storage.kind not in MEMORY_KINDS]


def _demand_p99(calcs: Sequence[TierCalc]) -> float | None:
    """The busiest storage tier's p99 demand per unit (write or read, the larger)."""
    values = [
        max(c.review.write.p99_bytes_per_s, c.review.read.p99_bytes_per_s if c.review.read else 0)
        for c in calcs
    ]
    return max(values) if values else None


def plan_facts(
    plan: Plan,
    stages: Mapping[str, tuple[StagePlan, list[TierCalc]]],
    reviews: Sequence[StageReview],
    replayed: Any,
    not_replayed: str | None,
) -> FactSet:
    """Facts of the whole plan: SLO, the closed-loop replay, the two stages' storage."""
    f = FactSet()
    f.add("plan_name", plan.name)
    f.add("plan_tp", plan.model.tp)
    f.add("plan_disaggregated", Stage.PREFILL in stages and Stage.DECODE in stages)
    f.add("plan_ttft_p99_slo_s", plan.slo.ttft_p99_s, "the plan sets no TTFT p99 SLO")
    f.add("plan_tpot_p99_slo_s", plan.slo.tpot_p99_s, "the plan sets no TPOT p99 SLO")
    f.add("plan_replayed", replayed is not None)
    why = f"not replayed: {not_replayed}"
    if replayed is None:
        for name in ("fleet_slo_targets_missed", "fleet_overloaded", "fleet_slo_summary"):
            f.add(name, None, why)
    else:
        res = replayed.result
        parts, missed = [], 0
        for name, target, attained in (
            ("ttft_p99_s", plan.slo.ttft_p99_s, "fleet_ttft_p99_attainment"),
            ("tpot_p99_s", plan.slo.tpot_p99_s, "fleet_tpot_p99_attainment"),
        ):
            if target is None:
                continue
            met = res.slo.met.get(name, True)
            share = res.slo.attainment.get(name)
            f.add(attained, share if share is not None else 1.0)
            missed += not met
            parts.append(
                f"{name.split('_')[0].upper()} p99 target {format_value(target, Unit.SECONDS)}: "
                f"{'met' if met else 'missed'} ("
                f"{'unknown' if share is None else format_value(share, Unit.RATIO)} of requests "
                "within)"
            )
        if res.overload.overloaded:
            parts.append(f"the fleet is overloaded: {res.overload.reason}")
        if not parts:
            parts.append("no TTFT or TPOT SLO in the plan; the fleet keeps up")
        f.add("fleet_slo_targets_missed", missed)
        f.add("fleet_overloaded", res.overload.overloaded)
        f.add("fleet_slo_summary", "; ".join(parts))
    # Stage balance (DESIGN.md cause 2) and one storage specification for both stages.
    by = {r.stage: r for r in reviews}
    need = "both stages need storage tiers with known bandwidth"
    for stage, mean_name, p99_name in (
        (
            Stage.PREFILL,
            "plan_prefill_storage_utilization_mean",
            "plan_prefill_storage_utilization_p99",
        ),
        (
            Stage.DECODE,
            "plan_decode_storage_utilization_mean",
            "plan_decode_storage_utilization_p99",
        ),
    ):
        u = by[stage].utilization if stage in by else None
        f.add(mean_name, None if u is None else u.mean, need)
        f.add(p99_name, None if u is None else u.p99, need)
    pre, dec = stages.get(Stage.PREFILL), stages.get(Stage.DECODE)
    if pre is not None and dec is not None:
        pst, dst = _storage_tiers(*pre), _storage_tiers(*dec)
        keys = {_storage_key(c.plan): c.plan for c in dst}
        same = next((c.plan for c in pst if _storage_key(c.plan) in keys), None)
        f.add("plan_stages_share_storage_spec", same is not None)
        if same is not None:
            f.add(
                "plan_shared_storage_spec",
                f"{same.devices} x {same.storage.catalog_name or same.storage.kind}"
                f" of {format_value(same.capacity_bytes, Unit.BYTES)}"
                if same.capacity_bytes is not None
                else f"{same.devices} x {same.storage.catalog_name or same.storage.kind}",
            )
        f.add("plan_prefill_storage_demand_bytes_per_s_p99", _demand_p99(pst), need)
        f.add("plan_decode_storage_demand_bytes_per_s_p99", _demand_p99(dst), need)
        _deployment_facts(f, pre[0], dec[0])
    return f


def _deployment_facts(f: FactSet, prefill: StagePlan, decode: StagePlan) -> None:
    """Where a disaggregated plan's two stages run: one deployment or two (RV14)."""
    missing = [s.stage for s in (prefill, decode) if s.instance_spec is None]
    why = f"{' and '.join(missing)} names no catalog instance: its provider is not known"
    for stage, name in ((prefill, "plan_prefill_deployment"), (decode, "plan_decode_deployment")):
        spec = stage.instance_spec
        f.add(name, None if spec is None else f"{spec.name} ({deployment(spec)})", why)
    if missing:
        f.add("plan_same_deployment", None, why)
        f.add("plan_deployment_reason", None, why)
        return
    verdict = same_deployment(prefill.instance_spec, decode.instance_spec)
    f.add("plan_same_deployment", verdict.ok)
    f.add("plan_deployment_reason", verdict.reason)


# -- a stage ------------------------------------------------------------------------------------
def stage_facts(
    plan: Plan,
    stage: StagePlan,
    pool: float | None,
    load_p99_s: float | None,
    replayed: bool,
) -> FactSet:
    """Facts of one stage: its instance, load time, KV layout on storage, engine settings."""
    f = FactSet()
    s = EngineSettings(stage, plan, pool)
    f.add("stage_name", stage.stage)
    f.add("stage_prefills", stage.prefills)
    f.add("stage_instance", stage.instance)
    f.add("stage_count", stage.count)
    f.add(
        "stage_gpus_per_instance",
        stage.gpus_per_instance,
        "the instance's GPUs are unknown (give instance or gpus_per_instance)",
    )
    f.add("stage_ranks", s.ranks)
    f.add("stage_tp", s.stage_tp)
    f.add(
        "stage_host_memory_bytes",
        stage.host_memory_bytes,
        "the instance's host memory is unknown (give instance or host_memory)",
    )
    no_pool = "the device KV pool is unknown (give gpu_kv_pool, or a catalog model and GPU)"
    f.add("stage_device_pool_bytes", pool, no_pool)
    f.add("stage_device_pool_bytes_per_rank", None if not pool else pool / s.ranks, no_pool)
    f.add(
        "stage_load_time_p99_s",
        load_p99_s,
        "load time unknown (hashes or tier read bandwidth missing)",
    )
    f.add("stage_load_time_basis", "in the closed-loop replay" if replayed else "alone")
    chunk, why = stage.io_chunk_tokens()
    layer_first, words = s.layout()
    f.add("stage_kv_page_tokens", chunk)
    f.add("stage_kv_page_from", why)
    f.add("stage_kv_layer_first", layer_first)
    f.add("stage_kv_layout", words)
    spec = plan.model.spec
    replica_tp = stage.gpus_per_replica or s.serving_tp()
    f.add("stage_kv_shard_ranks", 1 if spec is not None and spec.is_mla else replica_tp)
    f.add(
        "stage_model_layers",
        None if spec is None else spec.layers,
        "the model's layers are unknown (name a catalog model)",
    )
    settings_facts(f, s)
    return f


# -- a tier -------------------------------------------------------------------------------------
def _devices_for_capacity(tier: TierPlan) -> int:
    """Devices that hold the tier's capacity at the largest size the catalog sells per device."""
    largest = None if tier.spec is None else tier.spec.largest_device_bytes
    return devices_for_capacity(tier.capacity_bytes, tier.devices, largest)


def tier_facts(
    stage: StagePlan,
    calc: TierCalc,
    stage_f: FactSet,
    kv_bytes_per_token: int,
    times_s: np.ndarray,
    span_s: float,
    window_s: float,
    replayed: bool = False,
) -> FactSet:
    """Facts of one tier: demand, capability and utilization, I/O size and rate, deployability.

    ``replayed``: the tier's demand is the closed-loop replay's; its I/O rates follow it.
    """
    f = FactSet()
    r, t = calc.review, calc.plan
    kind = t.storage.kind
    f.add("tier_name", t.name)
    f.add("tier_kind", kind)
    f.add("tier_storage", t.storage.catalog_name or "inline")
    f.add("tier_disk_like", kind in DISK_KINDS)
    f.add("tier_bounded", t.capacity_bytes is not None)
    f.add("tier_capacity_bytes", t.capacity_bytes, "the tier has no capacity bound")
    f.add("tier_devices", t.devices)
    f.add("tier_bandwidth_sized", kind not in MEMORY_KINDS)
    hits_why = NO_HASHES if stage.prefills else "decode tiers serve no prefix hits in this model"
    f.add("tier_hit_ratio_steady", r.hit_ratio_steady, hits_why)
    f.add("tier_cumulative_hit_ratio_steady", r.cumulative_hit_ratio_steady, hits_why)
    read_why = (
        "decode tiers are written, not read, in this model (KV reaches decode from prefill over "
        "the network)"
        if not stage.prefills
        else "read demand is unknown: the trace has no block hashes"
    )
    for direction, rate, cap, u, absent in (
        ("write", r.write, r.write_capability_bytes_per_s, r.write_utilization, None),
        ("read", r.read, r.read_capability_bytes_per_s, r.read_utilization, read_why),
    ):
        no_cap = f"the tier's {direction} bandwidth is not known"
        demand = {
            "mean": None if rate is None else rate.mean_bytes_per_s,
            "p99": None if rate is None else rate.p99_bytes_per_s,
            "peak": None if rate is None else rate.peak_bytes_per_s,
        }
        util = {"mean": u.mean, "p99": u.p99, "peak": u.peak}
        missing = absent if rate is None else no_cap
        names = DIRECTION_FACTS[direction]
        for q in ("mean", "p99", "peak"):
            f.add(names.bytes_per_s[q], demand[q], absent)
            f.add(names.utilization[q], util[q], missing)
        f.add(names.capability_bytes_per_s, cap, no_cap)
    # A tier bought for its bandwidth (DRAM and CXL bandwidth comes with the memory and is
    # never the thing sized): its busier direction by mean, and each direction's p99 and peak
    # (the devices each needs, the larger of the two directions).
    used = (
        []
        if kind in MEMORY_KINDS
        else [u for u in (r.write_utilization, r.read_utilization) if u.mean is not None]
    )
    busy_why = (
        "memory bandwidth comes with the memory; it is not sized on its own"
        if kind in MEMORY_KINDS
        else "bandwidth or demand unknown"
    )
    mean = max((u.mean for u in used if u.mean is not None), default=None)
    p99 = max((u.p99 for u in used if u.p99 is not None), default=None)
    peak = max((u.peak for u in used if u.peak is not None), default=None)
    f.add("tier_utilization_mean", mean, busy_why)
    f.add("tier_utilization_p99", p99, busy_why)
    f.add("tier_utilization_peak", peak, busy_why)
    for_p99 = devices_for(t.devices, p99, TARGET_TIER_UTILIZATION)
    for_peak = devices_for(t.devices, peak)
    for_cap = _devices_for_capacity(t)
    f.add("tier_devices_for_p99", for_p99, busy_why)
    f.add("tier_devices_for_peak", for_peak, busy_why)
    f.add("tier_devices_for_capacity", for_cap)
    f.add("tier_devices_needed", None if for_p99 is None else max(for_p99, for_cap), busy_why)
    # Load against recompute (RV06).
    if stage.prefills:
        why = (
            "needs the model and GPU (performance model), the tier's read bandwidth and block "
            "hashes"
        )
        known = r.break_even_tokens is not None
        p_star = r.break_even_tokens
        f.add(
            "tier_break_even_tokens",
            None if p_star is None or math.isinf(p_star) else p_star,
            why if not known else "loading never beats recomputing",
        )
        f.add(
            "tier_load_pays_above",
            None
            if not known
            else ("never" if math.isinf(p_star) else format_value(p_star, Unit.TOKENS)),
            why,
        )
        f.add(
            "tier_below_break_even_share",
            None if not known else (r.below_break_even_share or 0.0),
            why,
        )
    _io_facts(f, stage, calc, stage_f, kv_bytes_per_token, times_s, span_s, window_s, replayed)
    # Deployability (RV09): a catalog option on a catalog instance.
    checked = t.spec is not None and stage.instance_spec is not None
    f.add("tier_catalog_checked", checked)
    if checked:
        f.add("tier_deployable", not calc.reach.problems)
        f.add("tier_deploy_problems", "; ".join(calc.reach.problems) or "none")
        f.add("tier_deploy_limit", calc.reach.limit)
        f.add("tier_unconfirmed", ", ".join(calc.reach.unconfirmed) or "none")
    return f


def _io_facts(
    f: FactSet,
    stage: StagePlan,
    c: TierCalc,
    stage_f: FactSet,
    kvb: int,
    times_s: np.ndarray,
    span_s: float,
    window_s: float,
    replayed: bool,
) -> None:
    """The real I/O size on the tier, its rate against IOPS, and what it costs the device.

    Each page moves as ``shard`` objects (one per rank that holds part of a token's KV), and
    layer by layer under a layer-first layout: ``ios per page = shard x (layers if layer
    first)`` and ``I/O bytes = page tokens x KV bytes per token / ios per page``. I/Os per
    second: open loop, each request's tokens in whole pages at its arrival; replayed, the
    replay's bytes per second over the I/O size.
    """
    sv = stage_f.values
    page = int(sv["stage_kv_page_tokens"].value)
    layer_first = bool(sv["stage_kv_layer_first"].value)
    shard = int(sv["stage_kv_shard_ranks"].value)
    layers = sv.get("stage_model_layers")
    per_page: int | None = shard
    if layer_first:
        per_page = None if layers is None else shard * int(layers.value)
    why_layers = "the model's layers are unknown (name a catalog model): a layer-first I/O size"
    f.add("tier_chunk_tokens", page)
    f.add("tier_chunk_from", str(sv["stage_kv_page_from"].value))
    io_bytes = None if per_page is None else page * kvb / per_page
    f.add("tier_io_bytes", io_bytes, why_layers)
    # I/O operations per second at that size: each request moves its tokens in whole pages.
    no_iops = f"the tier's IOPS are not known (pages of {page} tokens)"
    directions = [("write", c.written_tokens, c.reach.write_iops, c.review.write)]
    if c.served_tokens is not None or (replayed and c.review.read is not None):
        directions.append(("read", c.served_tokens, c.reach.read_iops, c.review.read))
    utils_p99, utils_peak, parts = [], [], []
    for direction, tokens, cap, demand in directions:
        names = DIRECTION_FACTS[direction]
        if per_page is None or io_bytes is None:
            f.add(names.iops_p99, None, why_layers)
            continue
        if replayed and demand is not None:
            rate = IoRate(
                demand.mean_bytes_per_s / io_bytes,
                demand.p99_bytes_per_s / io_bytes,
                demand.peak_bytes_per_s / io_bytes,
            )
        elif tokens is not None:
            rate = io_rate(times_s, np.ceil(tokens / page) * per_page / c.fleet, window_s, span_s)
        else:
            continue
        f.add(names.iops_p99, rate.p99_bytes_per_s)
        f.add(names.iops_peak, rate.peak_bytes_per_s)
        f.add(names.iops_capability, cap, no_iops)
        if cap:
            utils_p99.append(rate.p99_bytes_per_s / cap)
            utils_peak.append(rate.peak_bytes_per_s / cap)
            parts.append(
                f"{direction} p99 {format_value(rate.p99_bytes_per_s, Unit.IOPS)} / peak "
                f"{format_value(rate.peak_bytes_per_s, Unit.IOPS)} against "
                f"{format_value(cap, Unit.IOPS)}"
            )
    why = why_layers if per_page is None else no_iops
    f.add("tier_iops_utilization_p99", max(utils_p99) if utils_p99 else None, why)
    f.add("tier_iops_utilization_peak", max(utils_peak) if utils_peak else None, why)
    f.add("tier_iops_summary", "; ".join(parts) or None, why)
    # What the device does at that I/O size (its own figures: IOPS at its io unit).
    s = c.plan.storage
    unit = c.plan.spec.io_unit_bytes if c.plan.spec is not None else None
    no_figs = "the tier's write bandwidth and write IOPS are not both known"
    efficient = efficient_io_bytes(s.write_bytes_per_s, s.write_iops)
    f.add("tier_efficient_io_bytes", efficient, no_figs)
    f.add("tier_io_unit_bytes", unit, "the tier's I/O unit is not in the catalog")
    bw, iops = s.write_bytes_per_s, s.write_iops
    share = None if io_bytes is None else io_bandwidth_share(io_bytes, bw, iops)
    f.add("tier_io_bandwidth_share", share, why_layers if io_bytes is None else no_figs)
    amp = None if io_bytes is None else write_amplification(io_bytes, unit)
    f.add(
        "tier_write_amplification",
        amp,
        why_layers if io_bytes is None else "the tier's I/O unit is not in the catalog",
    )
