"""Read plan.yaml with the safe loader and check it field by field (one line per mistake).

Every error names the file and the key path, says what is wrong and how to write it: unknown
fields get the closest known name, quantities must carry a unit of the right kind, capacities
and counts must not be negative, catalog names are looked up with suggestions.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.instances import InstanceSpec, find_instance, load_instances
from kvadvisor.catalog.models import ModelSpec, get_model
from kvadvisor.catalog.storage import (
    StorageSpec,
    catalog_files_by_kind,
    find_storage,
    load_storage,
)
from kvadvisor.errors import CatalogError, KvAdvisorError
from kvadvisor.plan.model import (
    ENGINES,
    STAGES,
    TIER_KINDS,
    ModelPlan,
    Plan,
    Slo,
    StagePlan,
    StorageCapability,
    TierPlan,
)
from kvadvisor.plan.quantity import QuantityError, parse_quantity
from kvadvisor.units import BYTES_PER_GIB, BYTES_PER_MB, US_PER_S
from kvadvisor.yamlio import load_yaml


class PlanError(KvAdvisorError):
    """A plan file is invalid (the message names file and key path and how to fix it)."""

    slug = "plan"


@dataclass(frozen=True)
class PlanCatalogs:
    """The catalogs a plan may name: storage options and instances (with any --catalog files).

    Models and GPUs come from their packaged catalogs (``get_model``, ``get_gpu``).
    """

    storage: Mapping[str, StorageSpec] = field(default_factory=dict)
    instances: Mapping[str, InstanceSpec] = field(default_factory=dict)

    @classmethod
    def packaged(cls, extra_files: tuple[str, ...] = ()) -> PlanCatalogs:
        """The packaged storage and instance catalogs, plus ``extra_files`` of either kind.

        GPU and model catalog files are accepted and left to the stage profiler; a file of any
        other kind is refused, as ``analyze --catalog`` refuses it.
        """
        if not extra_files:
            return _packaged_catalogs()
        by_kind = catalog_files_by_kind(extra_files)
        return cls(load_storage(by_kind["storage"]), load_instances(by_kind["instances"]))


@lru_cache(maxsize=1)
def _packaged_catalogs() -> PlanCatalogs:
    """The packaged catalogs, parsed once per process (they are data shipped with the code)."""
    return PlanCatalogs(MappingProxyType(load_storage()), MappingProxyType(load_instances()))


# Allowed keys per mapping of the plan; the value says what the key holds (for docs and errors).
TOP_KEYS = {
    "name": "text",
    "description": "text",
    "model": "mapping",
    "slo": "mapping",
    "traffic": "mapping",
    "stages": "mapping",
}
MODEL_KEYS = {
    "name": "catalog model name",
    "kv_bytes_per_token": "whole number",
    "tp": "whole number",
    "kv_dtype": "bf16 | fp16 | fp8",
    "weight_dtype": "bf16 | fp16 | fp8",
}
SLO_KEYS = {"ttft_p99": "time", "tpot_p99": "time"}
TRAFFIC_KEYS = {"scale": "number > 0"}
STAGE_KEYS = {
    "instance": "catalog instance name",
    "gpu": "GPU catalog name",
    "count": "whole number",
    "gpus_per_instance": "whole number",
    "host_memory": "size",
    "gpu_kv_pool": "size",
    "disk_bandwidth_cap": "rate",
    "chunk_tokens": "whole number",
    "engines": "mapping",
    "tiers": "list",
}
TIER_KEYS = {
    "name": "text",
    "storage": "catalog name or mapping",
    "capacity": "size or null",
    "devices": "whole number",
    "shared": "true | false",
}
INLINE_STORAGE_KEYS = {
    "kind": " | ".join(TIER_KINDS),
    "read_bandwidth": "rate",
    "write_bandwidth": "rate",
    "read_iops": "number",
    "write_iops": "number",
    "latency": "time",
}
DTYPES = ("bf16", "fp16", "fp8")


def engine_settings_table() -> dict[str, Any]:
    """The documented engine setting names (packaged data, with sources)."""
    text = resources.files("kvadvisor.plan").joinpath("data/engine_settings.yaml")
    with resources.as_file(text) as path:
        return load_yaml(path, PlanError)


class _Checker:
    """Walks the parsed document, keeping the file name for every message."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, what: str) -> PlanError:
        return PlanError(f"{self.path}: {where}: {what}")

    def mapping(self, where: str, value: Any, allowed: Mapping[str, str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping with keys {', '.join(allowed)}")
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.5)
                hint = (
                    f"; did you mean '{close[0]}'?"
                    if close
                    else (f"; known fields: {', '.join(allowed)}")
                )
                raise self.fail(f"{where}.{key}" if where else str(key), f"unknown field{hint}")
        return value

    def text(self, where: str, value: Any, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, f"expected text, got {value!r}")
        if choices and value not in choices:
            close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise self.fail(where, f"must be one of {', '.join(choices)}, got {value!r}{hint}")
        return value

    def whole(self, where: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected a whole number, got {value!r}")
        if value < minimum:
            raise self.fail(where, f"must be >= {minimum}, got {value}")
        return value

    def number(self, where: str, value: Any, positive: bool = False) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise self.fail(where, f"expected a number, got {value!r}")
        if value < 0 or (positive and value == 0):
            raise self.fail(where, f"must be {'> 0' if positive else '>= 0'}, got {value!r}")
        return float(value)

    def quantity(self, where: str, value: Any, kind: str) -> float:
        try:
            return parse_quantity(value, kind)
        except QuantityError as exc:
            raise self.fail(where, str(exc)) from None

    def catalog(self, where: str, name: Any, find: Any) -> Any:
        """``find(name)`` from a catalog; its CatalogError (with suggestions) gets the key path."""
        name = self.text(where, name)
        try:
            return find(name)
        except CatalogError as exc:
            raise self.fail(where, str(exc)) from None


# Storage catalog categories as plan tier kinds.
CATEGORY_KINDS = {
    "memory": "dram",
    "cxl": "cxl",
    "local_nvme": "ssd",
    "ephemeral": "ssd",
    "block": "block",
    "parallel_fs": "filesystem",
    "kv_store": "pool",
    "object": "object",
}


def _storage_from_spec(spec: StorageSpec, device_bytes: float | None) -> StorageCapability:
    """A storage option's figures in base units at one device's capacity (cloud disks scale)."""
    perf = spec.perf_at(None if device_bytes is None else device_bytes / BYTES_PER_GIB)

    def rate(mbps: float | None) -> float | None:
        return None if mbps is None else float(mbps) * BYTES_PER_MB

    latency_us = spec.effective_read_latency_us
    return StorageCapability(
        kind=CATEGORY_KINDS[spec.category],
        read_bytes_per_s=rate(perf.read_mbps),
        write_bytes_per_s=rate(perf.write_mbps),
        read_iops=perf.read_iops,
        write_iops=perf.write_iops,
        latency_s=None if latency_us is None else float(latency_us) / US_PER_S,
        catalog_name=spec.name,
        source=tuple(spec.source_text),
    )


def _check_engine_settings(
    c: _Checker, where: str, engine: str, settings: Any, table: Mapping[str, Any]
) -> dict[str, Any]:
    documented = table["engines"][engine]["settings"]
    settings = c.mapping(
        where,
        {} if settings is None else settings,
        {k: v.get("kind", "") for k, v in documented.items()},
    )
    out: dict[str, Any] = {}
    for key, value in settings.items():
        spec, at = documented[key], f"{where}.{key}"
        kind = spec["kind"]
        if kind == "bool" and not isinstance(value, bool):
            raise c.fail(at, f"expected true or false, got {value!r}")
        if kind == "int":
            # Chunk, page and block sizes divide token counts in the review: at least 1.
            value = c.whole(at, value, int(spec.get("minimum", 0)))
        elif kind == "number":
            unit = f" (in {spec['unit']}, as {engine} takes it)" if "unit" in spec else ""
            if isinstance(value, str):
                raise c.fail(at, f"expected a plain number{unit}, got {value!r}")
            value = c.number(at, value)
        elif kind == "str":
            value = c.text(at, value, tuple(spec["choices"]) if "choices" in spec else None)
        elif kind == "mapping" and not isinstance(value, dict):
            raise c.fail(at, f"expected a mapping, got {value!r}")
        out[key] = value
    return out


def _tier(c: _Checker, where: str, raw: Any, catalogs: PlanCatalogs) -> TierPlan:
    raw = c.mapping(where, raw, TIER_KEYS)
    if "storage" not in raw:
        raise c.fail(f"{where}.storage", "is required (a storage catalog name or an inline spec)")
    capacity = raw.get("capacity")
    capacity_bytes = None if capacity is None else c.quantity(f"{where}.capacity", capacity, "size")
    devices = c.whole(f"{where}.devices", raw.get("devices", 1), 1)
    storage = raw["storage"]
    if isinstance(storage, dict):
        s = c.mapping(f"{where}.storage", storage, INLINE_STORAGE_KEYS)
        at = f"{where}.storage"
        if "kind" not in s:
            raise c.fail(f"{at}.kind", f"is required: one of {', '.join(TIER_KINDS)}")

        def opt(key: str, kind: str) -> float | None:
            return None if s.get(key) is None else c.quantity(f"{at}.{key}", s[key], kind)

        cap = StorageCapability(
            kind=c.text(f"{at}.kind", s["kind"], TIER_KINDS),
            read_bytes_per_s=opt("read_bandwidth", "rate"),
            write_bytes_per_s=opt("write_bandwidth", "rate"),
            read_iops=None
            if s.get("read_iops") is None
            else c.number(f"{at}.read_iops", s["read_iops"]),
            write_iops=None
            if s.get("write_iops") is None
            else c.number(f"{at}.write_iops", s["write_iops"]),
            latency_s=opt("latency", "time"),
        )
    else:
        spec = c.catalog(f"{where}.storage", storage, lambda n: find_storage(catalogs.storage, n))
        per_device = None if capacity_bytes is None else capacity_bytes / devices
        cap = _storage_from_spec(spec, per_device)
    shared = raw.get("shared", cap.kind in ("pool", "filesystem", "object"))
    if not isinstance(shared, bool):
        raise c.fail(f"{where}.shared", f"expected true or false, got {shared!r}")
    return TierPlan(
        name=c.text(f"{where}.name", raw.get("name", cap.catalog_name or cap.kind)),
        storage=cap,
        capacity_bytes=capacity_bytes,
        devices=devices,
        shared=shared,
    )


def _stage(
    c: _Checker, name: str, raw: Any, catalogs: PlanCatalogs, table: Mapping[str, Any]
) -> StagePlan:
    where = f"stages.{name}"
    raw = c.mapping(where, raw, STAGE_KEYS)
    instance, gpus, host_mem, disk_cap, gpu = None, None, None, None, None
    if raw.get("instance") is not None:
        spec: InstanceSpec = c.catalog(
            f"{where}.instance", raw["instance"], lambda n: find_instance(catalogs.instances, n)
        )
        instance, gpus = spec.name, spec.gpu_count
        host_mem = None if spec.host_memory_gib is None else spec.host_memory_gib * BYTES_PER_GIB
        disk_cap = None if spec.disk_cap_mbps is None else spec.disk_cap_mbps * BYTES_PER_MB
        gpu = c.catalog(f"{where}.instance", spec.gpu, get_gpu)
    if raw.get("gpu") is not None:
        gpu = c.catalog(f"{where}.gpu", raw["gpu"], get_gpu)
    if raw.get("gpus_per_instance") is not None:
        gpus = c.whole(f"{where}.gpus_per_instance", raw["gpus_per_instance"], 1)
    if raw.get("host_memory") is not None:
        host_mem = c.quantity(f"{where}.host_memory", raw["host_memory"], "size")
    if raw.get("disk_bandwidth_cap") is not None:
        disk_cap = c.quantity(f"{where}.disk_bandwidth_cap", raw["disk_bandwidth_cap"], "rate")
    engines_raw = _or_empty(raw.get("engines"), {})
    engines_raw = c.mapping(f"{where}.engines", engines_raw, {e: "settings" for e in ENGINES})
    engines = {
        e: _check_engine_settings(c, f"{where}.engines.{e}", e, s, table)
        for e, s in engines_raw.items()
    }
    tiers_raw = _or_empty(raw.get("tiers"), [])
    if not isinstance(tiers_raw, list):
        raise c.fail(f"{where}.tiers", "expected a list of tiers, fastest first")
    tiers = tuple(_tier(c, f"{where}.tiers[{i}]", t, catalogs) for i, t in enumerate(tiers_raw))
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise c.fail(f"{where}.tiers", f"tier names must be unique, got {names}")
    return StagePlan(
        stage=name,
        instance=instance,
        gpu=gpu,
        count=c.whole(f"{where}.count", raw.get("count", 1), 1),
        gpus_per_instance=gpus,
        host_memory_bytes=host_mem,
        gpu_kv_pool_bytes=None
        if raw.get("gpu_kv_pool") is None
        else c.quantity(f"{where}.gpu_kv_pool", raw["gpu_kv_pool"], "size"),
        disk_bandwidth_cap_bytes_per_s=disk_cap,
        tiers=tiers,
        engines=engines,
        chunk_tokens=None
        if raw.get("chunk_tokens") is None
        else c.whole(f"{where}.chunk_tokens", raw["chunk_tokens"], 1),
    )


def _or_empty(value: Any, empty: Any) -> Any:
    """A missing (None) section as ``empty``; any other value is kept, to be type-checked."""
    return empty if value is None else value


def _yaml_type(value: Any) -> str:
    """What a parsed YAML value is, in the words of a YAML writer."""
    if isinstance(value, list):
        return "list"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "text" if isinstance(value, str) else type(value).__name__


def check_plan(path: str, data: Any, catalogs: PlanCatalogs | None = None) -> Plan:
    """Check a parsed plan document and build the Plan (raises PlanError).

    ``catalogs`` None means the packaged storage and instance catalogs.
    """
    catalogs = catalogs or PlanCatalogs.packaged()
    table = engine_settings_table()
    c = _Checker(path)
    doc = c.mapping("", data, TOP_KEYS) if isinstance(data, dict) else None
    if doc is None:
        got = "an empty file" if data is None else f"a {_yaml_type(data)}"
        raise PlanError(
            f"{path}: expected a mapping with keys {', '.join(TOP_KEYS)}, got {got}; "
            "see docs/review.md for the plan format"
        )
    if "model" not in doc:
        raise c.fail("model", "is required (name and/or kv_bytes_per_token)")
    m = c.mapping("model", doc["model"], MODEL_KEYS)
    model_spec: ModelSpec | None = None
    if m.get("name") is not None:
        model_spec = c.catalog("model.name", m["name"], get_model)
    model_name = None if model_spec is None else model_spec.name
    kvb = (
        None
        if m.get("kv_bytes_per_token") is None
        else c.whole("model.kv_bytes_per_token", m["kv_bytes_per_token"], 1)
    )
    if model_name is None and kvb is None:
        raise c.fail("model", "give a catalog model name or kv_bytes_per_token")
    model = ModelPlan(
        name=model_name,
        spec=model_spec,
        kv_bytes_per_token=kvb,
        tp=c.whole("model.tp", m.get("tp", 1), 1),
        kv_dtype=c.text("model.kv_dtype", m.get("kv_dtype", "bf16"), DTYPES),
        weight_dtype=(
            c.text("model.weight_dtype", m["weight_dtype"], DTYPES)
            if m.get("weight_dtype") is not None
            else None
        ),
    )
    slo_raw = c.mapping("slo", _or_empty(doc.get("slo"), {}), SLO_KEYS)
    slo = Slo(
        **{f"{k}_s": c.quantity(f"slo.{k}", v, "time") for k, v in slo_raw.items() if v is not None}
    )
    traffic = c.mapping("traffic", _or_empty(doc.get("traffic"), {}), TRAFFIC_KEYS)
    scale = c.number("traffic.scale", traffic.get("scale", 1.0), positive=True)
    stages_raw = c.mapping("stages", doc.get("stages"), {s: "stage" for s in STAGES})
    if not stages_raw:
        raise c.fail("stages", "give at least one of prefill, decode")
    stages = tuple(_stage(c, s, stages_raw[s], catalogs, table) for s in STAGES if s in stages_raw)
    return Plan(
        name=c.text("name", doc.get("name", Path(path).stem)),
        path=path,
        model=model,
        stages=stages,
        slo=slo,
        traffic_scale=scale,
        description=""
        if doc.get("description") is None
        else c.text("description", doc["description"]),
    )


def load_plan(path: str | Path, catalogs: PlanCatalogs | None = None) -> Plan:
    """Load and check one plan file (the only function here that reads a file)."""
    return check_plan(str(path), load_yaml(path, PlanError), catalogs)
