"""A candidate deployment, written as the plan document `review` and `replay` read.

The search never builds a replay deployment by hand: a candidate becomes a plan document
(docs/review.md keys), the plan loader checks it, and the replay builds its deployment from
it (:func:`kvadvisor.fleet.fromplan.deployment_from_plan`). What the search replayed is
therefore what ``--emit plan`` writes and what `kvadvisor review` replays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from kvadvisor.advice.space import Shape
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.engines import registry
from kvadvisor.fleet import Deployment
from kvadvisor.fleet.fromplan import deployment_from_plan
from kvadvisor.plan.loader import PlanCatalogs, check_plan
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB
from kvadvisor.vocab import Stage, Topology


@dataclass(frozen=True)
class TierPick:
    """One KV tier of a stage as the plan gives it.

    ``storage`` names the catalog entry; the host-memory tier is written inline (its
    bandwidth is the GPUs' host links, which no storage entry states). ``capacity_bytes`` is
    per unit of ``scope`` (one instance, or the pool).
    """

    name: str
    category: str
    scope: str  # "instance" | "pooled"
    capacity_bytes: float | None
    devices: int = 1
    storage: StorageSpec | None = None
    inline: Mapping[str, Any] | None = None
    usd_per_hour: float | None = 0.0  # every unit together
    price_basis: str = ""
    why: str = ""
    unconfirmed: tuple[str, ...] = ()


@dataclass(frozen=True)
class StagePick:
    """One stage: a shape, how many instances, its tiers and router."""

    role: Stage  # serving | prefill | decode
    shape: Shape
    count: int
    tiers: tuple[TierPick, ...] = ()
    router: str = "prefix_aware"
    tier_note: str = field(default="", compare=False)  # why a tier is absent, when one is

    @property
    def gpus(self) -> int:
        """GPUs of the stage."""
        return self.count * self.shape.instance.gpu_count

    @property
    def usd_per_hour(self) -> float | None:
        """Instances at their on-demand price plus tiers; None when any part is unpriced."""
        parts = [None if self.shape.price is None else self.shape.price * self.count]
        parts += [t.usd_per_hour for t in self.tiers]
        return None if any(p is None for p in parts) else float(sum(p for p in parts if p))

    def label(self) -> str:
        """E.g. "3 x p5en.48xlarge TP 2 x 4" (instances, TP, replicas per instance)."""
        s = self.shape
        return f"{self.count} x {s.instance.name} TP {s.tp} x {s.replicas_per_instance}"


@dataclass(frozen=True)
class Candidate:
    """A whole deployment of one provider: one serving stage, or prefill and decode."""

    provider: str
    topology: Topology
    stages: tuple[StagePick, ...]
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def gpus(self) -> int:
        """GPUs of the whole fleet."""
        return sum(s.gpus for s in self.stages)

    @property
    def usd_per_hour(self) -> float | None:
        """The fleet's $/h; None when any instance or tier is unpriced."""
        parts = [s.usd_per_hour for s in self.stages]
        return None if any(p is None for p in parts) else float(sum(p for p in parts if p))

    def label(self) -> str:
        """The fleet in one line, e.g. "prefill 2 x p5en TP 2 x 4 + decode 1 x ..."."""
        if self.topology == Topology.AGGREGATED:
            return f"aggregated {self.stages[0].label()}"
        return " + ".join(f"{s.role} {s.label()}" for s in self.stages)

    def with_count(self, role: Stage, count: int) -> Candidate:
        """The same deployment with ``count`` instances in stage ``role`` (tiers rescaled)."""
        stages = tuple(
            StagePick(s.role, s.shape, count, s.tiers, s.router, s.tier_note)
            if s.role == role
            else s
            for s in self.stages
        )
        return Candidate(self.provider, self.topology, stages, self.notes)


def _gib(nbytes: float) -> str:
    """Bytes as GiB to a millionth, rounded up (so a size read back is never short)."""
    gib = math.ceil(nbytes / BYTES_PER_GIB * 1e6) / 1e6
    return f"{gib:.6f}".rstrip("0").rstrip(".") + " GiB"  # exact: a plan value review reads


def _rate(bytes_per_s: float) -> str:
    """Bytes per second as GB/s, nine significant digits (rounded down by at most 5e-9)."""
    return f"{bytes_per_s / BYTES_PER_GB:.9g} GB/s"  # exact: a plan value review reads


def _tier_doc(t: TierPick, chunk_tokens: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": t.name}
    if t.storage is not None:
        doc["storage"] = t.storage.name
    else:
        inline = dict(t.inline or {})
        for key in ("read_bandwidth", "write_bandwidth"):
            if isinstance(inline.get(key), (int, float)):
                inline[key] = _rate(float(inline[key]))
        doc["storage"] = inline
    doc["capacity"] = None if t.capacity_bytes is None else _gib(t.capacity_bytes)
    if t.devices != 1:
        doc["devices"] = t.devices
    doc["scope"] = t.scope
    doc["io_tokens"] = chunk_tokens
    return doc


def _stage_doc(s: StagePick, chunk_tokens: int, engine: str, attention: str) -> dict[str, Any]:
    shape = s.shape
    # the page the engine runs this model with on this GPU (engines/data/<engine>.yaml)
    page = registry.page_for(engine, attention, shape.gpu.architecture).tokens
    doc: dict[str, Any] = {
        "instance": shape.instance.name,
        "count": s.count,
        "gpus_per_replica": shape.tp,
        "replicas_per_instance": shape.replicas_per_instance,
        "router": s.router,
        "chunk_tokens": chunk_tokens,
        "scheduler": {
            "max_num_batched_tokens": shape.max_batched_tokens,
            "max_num_seqs": shape.max_seqs,
            "page_tokens": page,
            "preemption": "recompute",
        },
    }
    if s.tiers:
        doc["write_policy"] = "write_through"
        doc["kv_load"] = {"mode": "async"}
    # Decode KV is not kept in storage: the next turn's prefill looks up its prompt's blocks.
    doc["save_decode_kv"] = False
    doc["tiers"] = [_tier_doc(t, chunk_tokens) for t in s.tiers]
    return doc


def plan_document(
    candidate: Candidate,
    model: str,
    kv_dtype: str,
    weight_dtype: str,
    chunk_tokens: int,
    slo: Mapping[str, float],
    name: str,
    description: str,
    engine: str = "vllm",
    attention: str = "gqa",
) -> dict[str, Any]:
    """The candidate as a plan mapping (docs/review.md); ``slo`` in seconds (p99 keys kept).

    Each stage's KV page is the one ``engine`` runs a model of ``attention`` with on the
    stage's GPU (the engine registry's ``page``).
    """
    tp = candidate.stages[0].shape.tp
    doc: dict[str, Any] = {
        "name": name,
        "description": description,
        "model": {"name": model, "tp": tp, "kv_dtype": kv_dtype, "weight_dtype": weight_dtype},
    }
    kept = {
        k[: -len("_s")]: f"{v:.9g} s"  # exact: a plan value review reads
        for k, v in slo.items()
        if k.endswith("_p99_s")
    }
    kept = {k: v for k, v in kept.items() if k in ("ttft_p99", "tpot_p99")}
    if kept:
        doc["slo"] = kept
    doc["topology"] = candidate.topology.value
    doc["stages"] = {
        s.role.value: _stage_doc(s, chunk_tokens, engine, attention) for s in candidate.stages
    }
    return doc


@lru_cache(maxsize=1)
def _catalogs() -> PlanCatalogs:
    return PlanCatalogs.packaged()


def deployment_of(
    doc: Mapping[str, Any], catalogs: PlanCatalogs | None = None
) -> tuple[Deployment, tuple[str, ...]]:
    """The replay deployment of a plan document, through the plan loader (ConfigError/PlanError)."""
    plan = check_plan(str(doc.get("name", "candidate")), dict(doc), catalogs or _catalogs())
    return deployment_from_plan(plan)
