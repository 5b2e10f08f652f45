"""Tier capacities split to each engine's scope, and what the trace's hit-ratio curve says there.

An engine sizes a tier for one of its own units, and the unit differs by engine: SGLang's
``--hicache-size`` and LMCache's ``max_local_cpu_size`` are per GPU worker process (one TP
rank), KVBM's ``DYN_KVBM_CPU_CACHE_GB`` and vLLM's ``--kv-offloading-size`` per engine instance
(one TP group), a Mooncake store segment per node. :func:`share` divides a tier's capacity per
instance (node-local tiers) over the units on one instance; a shared pool is not divided.

Hit ratios are read off the report's curve at the tokens the whole stage holds in a tier:
every replica's share, as one cache behind prefix-aware routing (the review's optimistic bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kvadvisor.plan.model import StagePlan, TierPlan
from kvadvisor.results import AdviceReport
from kvadvisor.results.series import SeriesKey
from kvadvisor.units import Unit, format_value


class SizingScope(str, Enum):
    """The unit an engine sizes a tier for."""

    RANK = "rank"  # one GPU worker process: one TP rank
    REPLICA = "replica"  # one engine instance: one TP group
    NODE = "node"  # one serving instance (machine)
    POOL = "pool"  # one pool shared by the whole stage

    def plural(self, n: int) -> str:
        """'8 ranks', '1 replica'."""
        return f"{n} {self.value}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Share:
    """A tier's capacity for one unit of an engine's scope."""

    tier: TierPlan
    scope: SizingScope
    bytes: float  # per unit
    units_per_instance: int  # units that split one instance's capacity (1 for a pool)
    tokens_per_replica: float  # KV tokens one replica keeps in this tier
    stage_tokens: float  # KV tokens the whole stage keeps (a pool: the pool)

    def split_text(self) -> str:
        """How the unit's bytes were obtained, e.g. '1.6 TiB per instance / 8 ranks'."""
        cap = self.tier.capacity_bytes or 0.0
        where = "per pool" if self.tier.shared else "per instance"
        if self.units_per_instance == 1:
            return f"{_gib(cap)} {where}"
        return f"{_gib(cap)} {where} / {self.scope.plural(self.units_per_instance)}"


def _gib(nbytes: float) -> str:
    return format_value(nbytes, Unit.BYTES)


def share(kv_rank: float, stage: StagePlan, tier: TierPlan, scope: SizingScope) -> Share:
    """Split ``tier``'s capacity to one ``scope`` unit of ``stage`` (0 bytes when unbounded).

    Node-local tiers: capacity per instance / ranks (RANK), / replicas (REPLICA), whole (NODE).
    A shared tier sized per replica (an engine whose tier is private to each engine instance,
    such as KVBM's disk) is split over every replica of the stage. ``kv_rank``: the KV bytes
    per token one rank keeps.
    """
    cap = tier.capacity_bytes or 0.0
    replica_bytes_per_token = kv_rank * stage.tp
    per_instance = stage.replicas_per_instance or 1
    if tier.shared and scope != SizingScope.POOL:
        units = stage.replicas * (stage.tp if scope == SizingScope.RANK else 1)
        per = cap / units
        replica = per * (stage.tp if scope == SizingScope.RANK else 1)
        return Share(
            tier,
            scope,
            per,
            units,
            replica / replica_bytes_per_token,
            cap / replica_bytes_per_token,
        )
    if scope == SizingScope.POOL or tier.shared:
        return Share(tier, SizingScope.POOL, cap, 1, 0.0, cap / replica_bytes_per_token)
    units = {
        SizingScope.RANK: stage.ranks_per_instance,
        SizingScope.REPLICA: per_instance,
        SizingScope.NODE: 1,
    }[scope]
    per = cap / units
    per_replica = cap / per_instance
    tokens = per_replica / replica_bytes_per_token
    return Share(tier, scope, per, units, tokens, tokens * stage.replicas)


@dataclass(frozen=True)
class Reuse:
    """The trace's prefix hit ratio at a capacity, and unbounded (None without block hashes)."""

    at_capacity: float | None
    unbounded: float | None
    kind: str  # "steady" or "all"
    trace: str

    def text(self, tokens: float) -> str:
        """'the trace's steady prefix hit ratio at 5.37M tokens is 22.2% (unbounded 39.8%)'."""
        if self.at_capacity is None or self.unbounded is None:
            return f"prefix reuse unknown: {self.trace} has no block hashes"
        return (
            f"the trace's {self.kind} prefix hit ratio at {format_value(tokens, Unit.TOKENS)} "
            f"is {format_value(self.at_capacity, Unit.RATIO)} "
            f"(unbounded {format_value(self.unbounded, Unit.RATIO)}; {self.trace})"
        )


def _curve(report: AdviceReport, kind: str) -> list[tuple[float, float]]:
    """(capacity tokens, hit ratio) points, ascending: the full curve when the report has it."""
    pc = report.prefix_cache
    assert pc is not None
    key = SeriesKey.HIT_RATIO_STEADY if kind == "steady" else SeriesKey.HIT_RATIO_ALL
    for series in pc.curve:
        if series.key is key:
            return sorted(zip(series.x, series.y, strict=True))
    points = [
        (float(p.capacity_tokens), p.hit_ratio_steady if kind == "steady" else p.hit_ratio_all)
        for p in pc.mrc
        if p.capacity_tokens is not None
    ]
    return sorted((x, y) for x, y in points if y is not None)


def _hit_at(curve: list[tuple[float, float]], capacity_tokens: float) -> float:
    """The curve's value at a capacity (a step function: the last point at or below it)."""
    below = [y for x, y in curve if x <= capacity_tokens]
    return below[-1] if below else 0.0


def reuse_at(report: AdviceReport, tokens: float) -> Reuse:
    """The measured hit ratio at ``tokens`` of capacity (steady state when the report has it)."""
    pc = report.prefix_cache
    trace = report.trace.path
    if pc is None or pc.hit_ratio.all is None:
        return Reuse(None, None, "all", trace)
    kind = "steady" if pc.hit_ratio.steady is not None else "all"
    top = pc.hit_ratio.steady if kind == "steady" else pc.hit_ratio.all
    return Reuse(_hit_at(_curve(report, kind), tokens), top, kind, trace)
