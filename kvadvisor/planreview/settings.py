"""A stage's engine settings as facts: what the engine lint (rules/lint/) reads.

Each engine's facts, host and disk demand and layout are its own (kvadvisor/engines/<engine>.py,
reached through the registry); sizes are checked in the engine's own unit and scope against the
plan's instance (per worker process, per engine instance, per node). Ranks on an instance are
its GPUs (``gpus_per_instance``, else the model's TP); an engine instance (replica) is ``tp``
of them. A setting absent from the plan is an absent fact,
so the rules that need it do not apply.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvadvisor.engines import registry
from kvadvisor.plan.engine_files import file_routers
from kvadvisor.plan.model import Plan, StagePlan, TierPlan
from kvadvisor.planreview.scope import FactSet

PLACEHOLDER_MARK = "<FILL:"
LOCAL_DISK_KINDS = ("ssd", "block")


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


class EngineSettings:
    """One stage's engine settings and the figures they are sized against."""

    def __init__(self, stage: StagePlan, plan: Plan, pool: float | None) -> None:
        self.stage, self.plan, self.pool = stage, plan, pool
        self.ranks = stage.gpus_per_instance or plan.model.tp

    def get(self, engine: str, key: str, default: Any = None) -> Any:
        """The setting ``key`` of ``engine`` (``default`` when unset)."""
        return self.stage.engines.get(engine, {}).get(key, default)

    def has(self, engine: str, key: str) -> bool:
        """Whether ``engine`` sets ``key``."""
        return key in self.stage.engines.get(engine, {})

    def tp(self, engine: str) -> int:
        """The TP ``engine`` runs (the setting its registry entry names, else the stage's)."""
        where = registry.engine(engine).tp_setting
        value = self.get(*where) if where else None
        return int(value or self.stage_tp)

    def serving_tp(self) -> int:
        """The TP of the stage's serving engine, else the stage's.

        The first engine, in registry order, whose own setting gives one (a connector such as
        LMCache runs at its engine's TP).
        """
        for e in registry.engines():
            where = e.tp_setting
            if e.name in self.stage.engines and where is not None and where[0] == e.name:
                return int(self.get(*where) or self.stage_tp)
        return self.stage_tp

    @property
    def stage_tp(self) -> int:
        """The stage's TP: its gpus_per_replica, else the plan's model.tp."""
        return self.stage.gpus_per_replica or self.plan.model.tp

    def replicas(self, engine: str) -> int:
        """Engine instances per instance: ranks over the engine's TP."""
        return max(1, self.ranks // self.tp(engine))

    def local_disk(self) -> TierPlan | None:
        """The stage's first node-local disk tier (ssd or block)."""
        return next((t for t in self.stage.tiers if t.storage.kind in LOCAL_DISK_KINDS), None)

    def shared_fs(self) -> TierPlan | None:
        """The stage's first file-system tier."""
        return next((t for t in self.stage.tiers if t.storage.kind == "filesystem"), None)

    def layout(self) -> tuple[bool, str]:
        """Whether the engine moves KV to storage layer by layer, and the layout in words.

        The first engine of the stage, in registry order, that says (``Engine.layout``); with
        none, LMCache's default, one object per chunk per rank, all layers.
        """
        for e in registry.engines():
            if e.name in self.stage.engines and e.layout is not None:
                return e.layout(self)
        return False, "no engine given: LMCache's default, one object per chunk per rank"


def settings_facts(f: FactSet, s: EngineSettings) -> None:
    """Every registered engine's facts of the stage's settings (absent where not set)."""
    for e in registry.engines():
        if e.facts is not None:
            e.facts(f, s)


def _kv_dtype(f: FactSet, plan: Plan, e: registry.Engine, settings: dict[str, Any]) -> None:
    """The KV dtype the engine stores (its kv-cache-dtype, or its default) against the plan's.

    The pool was sized at the plan's dtype: an engine left at ``auto`` stores the model's own
    dtype (BF16 or FP16, never FP8), so an FP8 plan needs the flag written.
    """
    spec = e.settings.get("settings", {}).get("kv-cache-dtype")
    if not spec or "stores" not in spec:
        return
    value = str(settings.get("kv-cache-dtype", spec.get("default", "auto")))
    stored = spec["stores"].get(value)  # None: the model's own dtype
    planned = plan.model.kv_dtype
    f.add("engine_kv_cache_dtype", value)
    f.add("plan_kv_dtype", planned)
    f.add("engine_kv_dtype_differs", planned == "fp8" if stored is None else stored != planned)


def _router(f: FactSet, stage: StagePlan, settings: dict[str, Any]) -> None:
    """The router a router file (read under the engine's ``router``) runs for this stage.

    The plan was replayed with the stage's ``router``; a file whose policy routes otherwise
    starts another deployment than the one the verdict held for.
    """
    found = settings.get("router")
    if not isinstance(found, dict):
        return
    routers = file_routers(found)
    policy = routers.get(stage.stage, routers.get("*"))
    if policy is None:
        return
    f.add("engine_file_router", policy)
    f.add("plan_router", stage.router)
    f.add("engine_router_differs", policy != stage.router)


def engine_facts(plan: Plan, stage: StagePlan, pool: float | None) -> list[tuple[str, FactSet]]:
    """Facts of each engine configured on the stage: host and disk it takes, placeholders, TP."""
    s = EngineSettings(stage, plan, pool)
    out = []
    for engine, settings in sorted(stage.engines.items()):
        f = FactSet()
        f.add("engine_name", engine)
        e = registry.engine(engine)
        host = e.host_demand(s) if e.host_demand is not None else None
        if host is not None:
            f.add("engine_host_bytes_needed", host[0])
            f.add("engine_host_demand_how", host[1])
        disk = e.disk_demand(s) if e.disk_demand is not None else None
        if disk is not None:
            need, tier, how = disk
            f.add("engine_disk_bytes_needed", need)
            f.add("engine_disk_demand_how", how)
            nowhere = "no bounded disk tier in the plan to hold it"
            f.add("engine_disk_tier_name", None if tier is None else tier.name, nowhere)
            f.add(
                "engine_disk_tier_capacity_bytes",
                None if tier is None else tier.capacity_bytes,
                nowhere,
            )
        _kv_dtype(f, plan, e, settings)
        _router(f, stage, settings)
        left = [p for p, v in _strings(settings, engine) if PLACEHOLDER_MARK in v]
        f.add("engine_placeholder_count", len(left))
        f.add("engine_placeholders", ", ".join(p.split(".", 1)[-1] for p in left) or "none")
        # The TP the engine's own settings give (not one it takes from another engine's).
        key = e.tp_setting[1] if e.tp_setting and e.tp_setting[0] == engine else None
        if key is not None and s.has(engine, key):
            tp = int(s.get(engine, key))
            width = tp * (int(s.get(engine, e.dp_setting, 1)) if e.dp_setting else 1)
            f.add("engine_tp", tp)
            f.add("engine_gpus_used", width)
        out.append((engine, f))
    return out
