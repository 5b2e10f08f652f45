"""Read plan.yaml with the safe loader and check it field by field (one line per mistake).

Every error names the file and the key path, says what is wrong and how to write it: unknown
fields get the closest known name, quantities must carry a unit of the right kind, capacities
and counts must not be negative, catalog names are looked up with suggestions.
"""

from __future__ import annotations

import difflib
import math
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvadvisor.catalog.crossref import check_references
from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.instances import InstanceSpec, find_instance, load_instances
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.catalog.perfcatalogs import PerfCatalogs, load_perf_catalogs
from kvadvisor.catalog.storage import (
    StorageSpec,
    catalog_files_by_kind,
    find_storage,
    load_storage,
)
from kvadvisor.engines import registry
from kvadvisor.errors import CatalogError, PlanError
from kvadvisor.io.fileio import check_input
from kvadvisor.io.yamlio import MAX_YAML_BYTES, load_yaml
from kvadvisor.plan.engine_files import (
    EngineFileError,
    merge_engine_settings,
    mooncake_bytes,
    read_engine_file,
)
from kvadvisor.plan.model import (
    FULL_BUFFER_ACTIONS,
    LOAD_MODES,
    PREEMPTION_MODES,
    PREFETCH_POLICIES,
    ROUTERS,
    STAGE_BLOCKS,
    TIER_KINDS,
    TIER_SCOPES,
    TOPOLOGIES,
    WRITE_POLICIES,
    KvLoadPlan,
    LinkPlan,
    ModelPlan,
    Plan,
    SchedulerPlan,
    Slo,
    StagePlan,
    StorageCapability,
    TierPlan,
)
from kvadvisor.quoting import name_problem, one_line
from kvadvisor.units import (
    BITS_PER_BYTE,
    BYTES_PER_GB,
    BYTES_PER_GIB,
    BYTES_PER_MB,
    US_PER_S,
    Unit,
    format_value,
)
from kvadvisor.units.format import MAX_DIGITS, count
from kvadvisor.units.parse import QuantityError, parse_quantity
from kvadvisor.vocab import Stage, Topology


@dataclass(frozen=True)
class PlanCatalogs:
    """The catalogs a plan may name: storage, instances, GPUs, models (with any --catalog files).

    ``perf`` holds the GPUs, models and step-model coefficients; the plan keeps it, so its
    replay computes step times from the same catalogs.
    """

    storage: Mapping[str, StorageSpec] = field(default_factory=dict)
    instances: Mapping[str, InstanceSpec] = field(default_factory=dict)
    perf: PerfCatalogs = field(default_factory=PerfCatalogs.packaged)

    @classmethod
    def packaged(cls, extra_files: tuple[str, ...] = ()) -> PlanCatalogs:
        """The packaged catalogs, plus ``extra_files`` of any kind (routed by their ``kind``).

        A file of an unknown kind is refused, as ``analyze --catalog`` refuses it.
        """
        if not extra_files:
            return _packaged_catalogs()
        by_kind = catalog_files_by_kind(extra_files)
        storage, instances = load_storage(by_kind["storage"]), load_instances(by_kind["instances"])
        check_references(storage, instances)
        perf = load_perf_catalogs(by_kind["gpus"], by_kind["models"], by_kind["efficiency"])
        return cls(storage, instances, perf)


@lru_cache(maxsize=1)
def _packaged_catalogs() -> PlanCatalogs:
    """The packaged catalogs, parsed once per process (they are data shipped with the code)."""
    return PlanCatalogs(
        MappingProxyType(load_storage()),
        MappingProxyType(load_instances()),
        PerfCatalogs.packaged(),
    )


# Upper bounds for every count and plain number in a plan, far above any real deployment:
# counts (instances, devices, GPUs, tokens per chunk) and IOPS or a traffic scale. A value
# beyond them is a typo, and would make the review allocate or loop by it.
MAX_COUNT = 1_000_000
MAX_NUMBER = 1e12
MAX_TP = 1024
MAX_SETTING = 1 << 53
MIN_TRAFFIC_SCALE = 1e-6

# Allowed keys per mapping of the plan; the value says what the key holds (for docs and errors).
TOP_KEYS = {
    "name": "text",
    "description": "text",
    "model": "mapping",
    "slo": "mapping",
    "traffic": "mapping",
    "topology": " | ".join(TOPOLOGIES),
    "pd_link": "mapping",
    "stages": "mapping",
}
LINK_KEYS = {"bandwidth": "rate", "efficiency": "number in (0, 1]", "latency": "time"}
SCHEDULER_KEYS = {
    "max_num_batched_tokens": "whole number",
    "max_num_seqs": "whole number",
    "page_tokens": "whole number",
    "preemption": " | ".join(PREEMPTION_MODES),
}
KV_LOAD_KEYS = {
    "mode": " | ".join(LOAD_MODES),
    "prefetch_policy": " | ".join(PREFETCH_POLICIES),
    "prefetch_timeout": "time",
    "prefetch_timeout_per_ki_token": "time",
    "min_tokens": "whole number",
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
    "engine_files": "list of engine configuration files",
    "tiers": "list",
    "gpus_per_replica": "whole number",
    "replicas_per_instance": "whole number",
    "scheduler": "mapping",
    "router": " | ".join(ROUTERS),
    "write_policy": " | ".join(WRITE_POLICIES),
    "kv_load": "mapping",
    "decode_offload": "tier name",
    "save_decode_kv": "true | false",
    "frontend": "mapping",
}
FRONTEND_KEYS = {"fixed": "time", "per_ki_token": "time"}
TIER_KEYS = {
    "name": "text",
    "storage": "catalog name or mapping",
    "capacity": "size or null",
    "devices": "whole number",
    "shared": "true | false",
    "scope": " | ".join(TIER_SCOPES),
    "write_buffer": "size",
    "on_full": " | ".join(FULL_BUFFER_ACTIONS),
    "io_tokens": "whole number",
    "efficiency": "number in (0, 1]",
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
    """The documented engine setting names: {"sources": {...}, "engines": {name: schema}}.

    Each registered engine brings its schema and sources (kvadvisor/engines/data/<engine>.yaml
    for the built-in ones). Callers only read it: the advisor's search checks one plan per
    replayed candidate, so it is built once per set of registered engines.
    """
    return _settings_table(registry.engines())


@lru_cache(maxsize=4)
def _settings_table(engines: tuple[registry.Engine, ...]) -> dict[str, Any]:
    sources: dict[str, str] = {}
    for e in engines:
        sources.update(e.sources)
    return {"sources": sources, "engines": {e.name: dict(e.settings) for e in engines}}


class _Checker:
    """Walks the parsed document, keeping the file name for every message."""

    def __init__(self, path: str, allow_outside_dir: bool = False) -> None:
        self.path = path
        # Engine files may be read from outside the plan's folder (--allow-outside-plan-dir).
        self.allow_outside_dir = allow_outside_dir

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

    def name(self, where: str, value: Any) -> str:
        """A name: text that is printable and on one line (it is written into generated files)."""
        text = self.text(where, value)
        problem = name_problem(text)
        if problem is not None:
            raise self.fail(where, problem)
        return text

    def whole(self, where: str, value: Any, minimum: int, maximum: int = MAX_COUNT) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected a whole number, got {value!r}")
        if value < minimum:
            raise self.fail(where, f"must be >= {minimum}, got {value}")
        if value > maximum:
            raise self.fail(where, f"must be at most {count(maximum)}, got {count(value)}")
        return value

    def number(
        self, where: str, value: Any, positive: bool = False, maximum: float = MAX_NUMBER
    ) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise self.fail(where, f"expected a number, got {value!r}")
        if value < 0 or (positive and value == 0):
            raise self.fail(where, f"must be {'> 0' if positive else '>= 0'}, got {value!r}")
        if value > maximum:
            most = format_value(maximum, Unit.COUNT, MAX_DIGITS)
            raise self.fail(where, f"must be at most {most}, got {value!r}")
        return float(value)

    def quantity(self, where: str, value: Any, kind: str) -> float:
        try:
            return parse_quantity(value, kind)
        except QuantityError as exc:
            raise self.fail(where, str(exc)) from None

    def positive(self, where: str, value: Any, kind: str, fix: str) -> float:
        """A quantity that must be above zero (capacities, bandwidths), or why not."""
        amount = self.quantity(where, value, kind)
        if amount <= 0:
            raise self.fail(where, f"must be above zero, got {value!r}; {fix}")
        return amount

    def flag(self, where: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {value!r}")
        return value

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
        measured=spec.scope == "per_client",
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
            # Engine settings hold byte sizes too: bounded by the table's maximum, or by 2^53
            # (every whole number below it is exact where the review computes in floats).
            value = c.whole(
                at, value, int(spec.get("minimum", 0)), int(spec.get("maximum", MAX_SETTING))
            )
        elif kind == "number":
            unit = f" (in {spec['unit']}, as {engine} takes it)" if "unit" in spec else ""
            if isinstance(value, str):
                raise c.fail(at, f"expected a plain number{unit}, got {value!r}")
            value = c.number(at, value)
        elif kind == "str":
            value = c.text(at, value, tuple(spec["choices"]) if "choices" in spec else None)
        elif kind == "mapping" and not isinstance(value, dict):
            raise c.fail(at, f"expected a mapping, got {value!r}")
        elif kind == "list":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise c.fail(at, f"expected a list of words, got {value!r}")
        elif kind == "mooncake-size":
            size = mooncake_bytes(value)
            if size is None:
                raise c.fail(
                    at,
                    f"expected whole bytes or a size such as '4 GB' (Mooncake: GiB), got {value!r}",
                )
            value = size
        out[key] = value
    return out


def _tier(c: _Checker, where: str, raw: Any, catalogs: PlanCatalogs) -> TierPlan:
    raw = c.mapping(where, raw, TIER_KEYS)
    if "storage" not in raw:
        raise c.fail(f"{where}.storage", "is required (a storage catalog name or an inline spec)")
    capacity = raw.get("capacity")
    capacity_bytes = (
        None
        if capacity is None
        else c.positive(
            f"{where}.capacity", capacity, "size", "give its size, or null for no bound"
        )
    )
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
            else c.number(f"{at}.read_iops", s["read_iops"], positive=True),
            write_iops=None
            if s.get("write_iops") is None
            else c.number(f"{at}.write_iops", s["write_iops"], positive=True),
            latency_s=opt("latency", "time"),
        )
        spec = None
    else:
        spec = c.catalog(f"{where}.storage", storage, lambda n: find_storage(catalogs.storage, n))
        per_device = None if capacity_bytes is None else capacity_bytes / devices
        cap = _storage_from_spec(spec, per_device)
    shared = c.flag(
        f"{where}.shared", raw.get("shared", cap.kind in ("pool", "filesystem", "object"))
    )
    scope = "pooled" if shared else "instance"
    if raw.get("scope") is not None:
        scope = c.text(f"{where}.scope", raw["scope"], TIER_SCOPES)
        if "shared" in raw and shared != (scope == "pooled"):
            raise c.fail(
                f"{where}.scope",
                f"'{scope}' contradicts shared: {str(shared).lower()}; keep one of the two",
            )
    return TierPlan(
        name=c.name(f"{where}.name", raw.get("name", cap.catalog_name or cap.kind)),
        storage=cap,
        capacity_bytes=capacity_bytes,
        devices=devices,
        shared=scope == "pooled",
        scope=scope,
        write_buffer_bytes=None
        if raw.get("write_buffer") is None
        else c.positive(
            f"{where}.write_buffer", raw["write_buffer"], "size", "or leave it out (unbounded)"
        ),
        on_full=c.text(f"{where}.on_full", raw.get("on_full", "block"), FULL_BUFFER_ACTIONS),
        io_tokens=None
        if raw.get("io_tokens") is None
        else c.whole(f"{where}.io_tokens", raw["io_tokens"], 1),
        efficiency=None
        if raw.get("efficiency") is None
        else _share(c, f"{where}.efficiency", raw["efficiency"]),
        spec=spec,
    )


def _share(c: _Checker, where: str, value: Any) -> float:
    """A share of a rated bandwidth, in (0, 1]."""
    share = c.number(where, value, positive=True)
    if share > 1:
        raise c.fail(where, f"is a share of the rated bandwidth, in (0, 1]; got {share}")
    return share


def _frontend(c: _Checker, where: str, raw: Any) -> dict[str, float]:
    """The stage's front-end cost per request: fixed and per 1,024 prompt tokens, seconds."""
    raw = c.mapping(where, _or_empty(raw, {}), FRONTEND_KEYS)
    out = {k: c.quantity(f"{where}.{k}", v, "time") for k, v in raw.items() if v is not None}
    for k, v in out.items():
        if v < 0:
            raise c.fail(f"{where}.{k}", f"is a time per request, at least 0 s; got {raw[k]!r}")
    return out


def _scheduler(c: _Checker, where: str, raw: Any) -> SchedulerPlan:
    raw = c.mapping(where, _or_empty(raw, {}), SCHEDULER_KEYS)

    def whole(key: str) -> int | None:
        return None if raw.get(key) is None else c.whole(f"{where}.{key}", raw[key], 1)

    return SchedulerPlan(
        max_num_batched_tokens=whole("max_num_batched_tokens"),
        max_num_seqs=whole("max_num_seqs"),
        page_tokens=whole("page_tokens"),
        preemption=c.text(
            f"{where}.preemption", raw.get("preemption", "recompute"), PREEMPTION_MODES
        ),
    )


def _kv_load(c: _Checker, where: str, raw: Any) -> KvLoadPlan | None:
    if raw is None:
        return None
    raw = c.mapping(where, raw, KV_LOAD_KEYS)

    def time(key: str) -> float:
        return 0.0 if raw.get(key) is None else c.quantity(f"{where}.{key}", raw[key], "time")

    return KvLoadPlan(
        mode=c.text(f"{where}.mode", raw.get("mode", "async"), LOAD_MODES),
        prefetch_policy=c.text(
            f"{where}.prefetch_policy",
            raw.get("prefetch_policy", "wait_complete"),
            PREFETCH_POLICIES,
        ),
        prefetch_timeout_s=time("prefetch_timeout"),
        prefetch_timeout_per_ki_token_s=time("prefetch_timeout_per_ki_token"),
        min_tokens=None
        if raw.get("min_tokens") is None
        else c.whole(f"{where}.min_tokens", raw["min_tokens"], 0),
    )


def _pd_link(c: _Checker, raw: Any) -> LinkPlan:
    raw = c.mapping("pd_link", _or_empty(raw, {}), LINK_KEYS)
    efficiency = (
        None
        if raw.get("efficiency") is None
        else c.number("pd_link.efficiency", raw["efficiency"], positive=True)
    )
    if efficiency is not None and efficiency > 1:
        raise c.fail(
            "pd_link.efficiency", f"is a share of the bandwidth, in (0, 1]; got {efficiency}"
        )
    return LinkPlan(
        bandwidth_bytes_per_s=None
        if raw.get("bandwidth") is None
        else c.positive("pd_link.bandwidth", raw["bandwidth"], "rate", "e.g. '50 GB/s'"),
        efficiency=efficiency,
        latency_s=0.0
        if raw.get("latency") is None
        else c.quantity("pd_link.latency", raw["latency"], "time"),
    )


def _stage(
    c: _Checker,
    name: str,
    raw: Any,
    catalogs: PlanCatalogs,
    table: Mapping[str, Any],
    model_tp: int = 1,
) -> StagePlan:
    where = f"stages.{name}"
    raw = c.mapping(where, raw, STAGE_KEYS)
    instance, gpus, host_mem, disk_cap, gpu, network = None, None, None, None, None, None
    spec: InstanceSpec | None = None
    if raw.get("instance") is not None:
        spec = c.catalog(
            f"{where}.instance", raw["instance"], lambda n: find_instance(catalogs.instances, n)
        )
        instance, gpus = spec.name, spec.gpu_count
        # KV crosses between prefill and decode over the GPU back-end (RDMA) network when
        # the instance has one (NIXL, Mooncake's transfer engine), else its front-end NIC.
        gbit = spec.backend_network_gbit or spec.frontend_network_gbit
        if gbit is not None:
            network = gbit * BYTES_PER_GB / BITS_PER_BYTE
        host_mem = None if spec.host_memory_gib is None else spec.host_memory_gib * BYTES_PER_GIB
        disk_cap = None if spec.disk_cap_mbps is None else spec.disk_cap_mbps * BYTES_PER_MB
        # An instance whose GPU the GPU catalog lacks (B300, GB200) still loads: the stage
        # then has no performance model unless the plan names a catalog GPU.
        gpu = _gpu_or_none(catalogs.perf, spec.gpu)
    if raw.get("gpu") is not None:
        gpu = c.catalog(f"{where}.gpu", raw["gpu"], catalogs.perf.gpu)
    if raw.get("gpus_per_instance") is not None:
        gpus = c.whole(f"{where}.gpus_per_instance", raw["gpus_per_instance"], 1)
    if raw.get("host_memory") is not None:
        host_mem = c.quantity(f"{where}.host_memory", raw["host_memory"], "size")
    if raw.get("disk_bandwidth_cap") is not None:
        disk_cap = c.quantity(f"{where}.disk_bandwidth_cap", raw["disk_bandwidth_cap"], "rate")
    engines_raw = _or_empty(raw.get("engines"), {})
    engines_raw = c.mapping(
        f"{where}.engines", engines_raw, {e: "settings" for e in registry.names()}
    )
    from_files = _engine_files(c, f"{where}.engine_files", raw.get("engine_files"), table)
    for engine, inline in engines_raw.items():
        if inline is not None and not isinstance(inline, dict):
            raise c.fail(
                f"{where}.engines.{engine}", f"expected a mapping of settings, got {inline!r:.60}"
            )
        from_files.setdefault(engine, {}).update(inline or {})
    engines = {
        e: _check_engine_settings(c, f"{where}.engines.{e}", e, s, table)
        for e, s in from_files.items()
    }
    tiers_raw = _or_empty(raw.get("tiers"), [])
    if not isinstance(tiers_raw, list):
        raise c.fail(f"{where}.tiers", "expected a list of tiers, fastest first")
    tiers = tuple(_tier(c, f"{where}.tiers[{i}]", t, catalogs) for i, t in enumerate(tiers_raw))
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise c.fail(f"{where}.tiers", f"tier names must be unique, got {names}")
    per_replica = (
        model_tp
        if raw.get("gpus_per_replica") is None
        else c.whole(f"{where}.gpus_per_replica", raw["gpus_per_replica"], 1)
    )
    if gpus is not None and per_replica > gpus:
        raise c.fail(
            f"{where}.gpus_per_replica",
            f"a replica of {per_replica} GPUs does not fit an instance of {gpus}; give at "
            f"most {gpus} (or a larger instance)",
        )
    n_instances = c.whole(f"{where}.count", raw.get("count", 1), 1)
    replicas = max((gpus or per_replica) // per_replica, 1)
    if raw.get("replicas_per_instance") is not None:
        replicas = c.whole(f"{where}.replicas_per_instance", raw["replicas_per_instance"], 1)
        if gpus is not None and replicas * per_replica > gpus:
            raise c.fail(
                f"{where}.replicas_per_instance",
                f"{replicas} replicas of {per_replica} GPUs need {replicas * per_replica} GPUs; "
                f"the instance has {gpus}",
            )
    if n_instances * replicas > MAX_COUNT:
        # The replay holds arrays per replica: the bound is on replicas, not instances alone.
        raise c.fail(
            f"{where}.count",
            f"{count(n_instances)} instances of {count(replicas)} replicas make "
            f"{count(n_instances * replicas)} replicas, more than the {count(MAX_COUNT)} a "
            "stage may have; give fewer instances",
        )
    fe = _frontend(c, f"{where}.frontend", raw.get("frontend"))
    offload = raw.get("decode_offload")
    if offload is not None:
        offload = c.text(f"{where}.decode_offload", offload, tuple(names))
    return StagePlan(
        stage=name,
        instance=instance,
        gpu=gpu,
        count=n_instances,
        gpus_per_instance=gpus,
        host_memory_bytes=host_mem,
        gpu_kv_pool_bytes=None
        if raw.get("gpu_kv_pool") is None
        else c.positive(
            f"{where}.gpu_kv_pool", raw["gpu_kv_pool"], "size", "or leave it out (modeled)"
        ),
        disk_bandwidth_cap_bytes_per_s=disk_cap,
        instance_spec=spec,
        tiers=tiers,
        engines=engines,
        chunk_tokens=None
        if raw.get("chunk_tokens") is None
        else c.whole(f"{where}.chunk_tokens", raw["chunk_tokens"], 1),
        gpus_per_replica=per_replica,
        replicas_per_instance=replicas,
        scheduler=_scheduler(c, f"{where}.scheduler", raw.get("scheduler")),
        router=c.text(f"{where}.router", raw.get("router", "round_robin"), ROUTERS),
        write_policy=None
        if raw.get("write_policy") is None
        else c.text(f"{where}.write_policy", raw["write_policy"], WRITE_POLICIES),
        kv_load=_kv_load(c, f"{where}.kv_load", raw.get("kv_load")),
        decode_offload=offload,
        save_decode_kv=None
        if raw.get("save_decode_kv") is None
        else c.flag(f"{where}.save_decode_kv", raw["save_decode_kv"]),
        frontend_fixed_s=fe.get("fixed"),
        frontend_per_ki_token_s=fe.get("per_ki_token"),
        network_bytes_per_s=network,
    )


def _engine_files(
    c: _Checker, where: str, names: Any, table: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Settings read back from the engine files a stage names (paths relative to the plan)."""
    if names is None:
        return {}
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise c.fail(where, "expected a list of engine configuration file names")
    out: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(names):
        at = f"{where}[{i}]"
        text = _engine_file_text(c, at, name)
        try:
            merge_engine_settings(out, read_engine_file(name, text, table))
        except (EngineFileError, ValueError) as exc:
            raise c.fail(at, str(exc)) from None
    return out


def _engine_file_text(c: _Checker, at: str, name: str) -> str:
    """One engine file's text, through the same boundary as the plan itself.

    A plan under review may come from someone else (CI gating submitted plans), so what it
    names is read only when it is a regular file, no larger than a plan may be, UTF-8, and
    (unless the reviewer allows otherwise) inside the plan's folder once symlinks are
    resolved: a plan cannot make kvadvisor read /etc/shadow, hang on a FIFO or read
    /dev/zero forever.
    """
    base = Path(c.path).parent
    path = base / name
    if not c.allow_outside_dir:
        root = os.path.realpath(base)
        if os.path.commonpath([root, os.path.realpath(path)]) != root:
            raise c.fail(
                at,
                f"{one_line(name)} is outside the plan's folder ({one_line(str(base))}); an "
                "engine file is read from the plan's folder or below it: move it there, or "
                "pass --allow-outside-plan-dir when you trust the plan",
            )
    try:
        check_input(path, PlanError, what="engine configuration file")
        # O_NONBLOCK: a file swapped for a FIFO after the check does not block the open; it
        # is refused by the fstat below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except PlanError as exc:
        raise c.fail(at, str(exc)) from None
    except OSError as exc:
        raise c.fail(at, f"cannot read {one_line(str(path))}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise c.fail(at, f"{one_line(str(path))}: not a regular file")
        data = fh.read(MAX_YAML_BYTES + 1)
    if len(data) > MAX_YAML_BYTES:
        raise c.fail(
            at,
            f"{one_line(str(path))}: over the {count(MAX_YAML_BYTES)}-byte limit for an engine "
            "file (the plan's own limit)",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise c.fail(
            at, f"{one_line(str(path))}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None


def _gpu_or_none(perf: PerfCatalogs, name: str) -> GpuSpec | None:
    """The GPU catalog's entry for an instance's GPU, None when the catalog has none."""
    try:
        return perf.gpu(name)
    except CatalogError:
        return None


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


def check_plan(
    path: str,
    data: Any,
    catalogs: PlanCatalogs | None = None,
    *,
    allow_outside_plan_dir: bool = False,
) -> Plan:
    """Check a parsed plan document and build the Plan (raises PlanError).

    ``catalogs`` None means the packaged storage and instance catalogs. Engine files are
    read from the plan's folder only, unless ``allow_outside_plan_dir``.
    """
    catalogs = catalogs or PlanCatalogs.packaged()
    table = engine_settings_table()
    c = _Checker(path, allow_outside_plan_dir)
    doc = c.mapping("", data, TOP_KEYS) if isinstance(data, dict) else None
    if doc is None:
        got = "an empty file" if data is None else f"a {_yaml_type(data)}"
        raise PlanError(
            f"{path}: expected a mapping with keys {', '.join(TOP_KEYS)}, got {got}; "
            "see `kvadvisor docs review#the-plan-file` for the plan format"
        )
    if "model" not in doc:
        raise c.fail("model", "is required (name and/or kv_bytes_per_token)")
    m = c.mapping("model", doc["model"], MODEL_KEYS)
    model_spec: ModelSpec | None = None
    if m.get("name") is not None:
        model_spec = c.catalog("model.name", m["name"], catalogs.perf.model)
    model_name = None if model_spec is None else model_spec.name
    kvb = (
        None
        if m.get("kv_bytes_per_token") is None
        else c.whole("model.kv_bytes_per_token", m["kv_bytes_per_token"], 1, 1 << 30)
    )
    if model_name is None and kvb is None:
        raise c.fail("model", "give a catalog model name or kv_bytes_per_token")
    model = ModelPlan(
        name=model_name,
        spec=model_spec,
        kv_bytes_per_token=kvb,
        tp=c.whole("model.tp", m.get("tp", 1), 1, MAX_TP),
        kv_dtype=c.text("model.kv_dtype", m.get("kv_dtype", "bf16"), DTYPES),
        weight_dtype=(
            c.text("model.weight_dtype", m["weight_dtype"], DTYPES)
            if m.get("weight_dtype") is not None
            else None
        ),
    )
    slo_raw = c.mapping("slo", _or_empty(doc.get("slo"), {}), SLO_KEYS)
    slo = Slo(
        **{
            f"{k}_s": c.positive(f"slo.{k}", v, "time", "give the latency target, e.g. 2 s")
            for k, v in slo_raw.items()
            if v is not None
        }
    )
    traffic = c.mapping("traffic", _or_empty(doc.get("traffic"), {}), TRAFFIC_KEYS)
    scale = c.number("traffic.scale", traffic.get("scale", 1.0), positive=True, maximum=1e6)
    if scale < MIN_TRAFFIC_SCALE:
        # Arrivals are divided by it: 1e-300 overflowed them, 1e-12 made demand series of
        # 10^14 windows.
        least, got = f"{MIN_TRAFFIC_SCALE:g}", f"{scale:g}"  # exact: as a plan spells it
        raise c.fail(
            "traffic.scale", f"must be at least {least} (a million times slower), got {got}"
        )
    stages_raw = c.mapping("stages", doc.get("stages"), {s.value: "stage" for s in STAGE_BLOCKS})
    if not stages_raw:
        raise c.fail("stages", "give prefill and/or decode, or one serving block (aggregated)")
    if Stage.SERVING in stages_raw and len(stages_raw) > 1:
        raise c.fail(
            "stages.serving",
            "an aggregated fleet has one serving block; prefill and decode blocks describe a "
            "disaggregated one: keep one of the two forms",
        )
    topology = Topology.AGGREGATED if Stage.SERVING in stages_raw else Topology.DISAGGREGATED
    if doc.get("topology") is not None:
        given = c.text("topology", doc["topology"], TOPOLOGIES)
        if given != topology:
            fix = (
                "give one block stages.serving"
                if given == "aggregated"
                else "give stages.prefill and stages.decode"
            )
            raise c.fail("topology", f"'{given}' does not match the stage blocks; {fix}")
    if model_spec is not None and (problem := model_spec.parallel_problem(model.tp)):
        raise c.fail("model.tp", problem)
    stages = tuple(
        _stage(c, s, stages_raw[s], catalogs, table, model.tp)
        for s in STAGE_BLOCKS
        if s in stages_raw
    )
    for stage in stages:
        per_replica = stage.gpus_per_replica
        if model_spec is not None and (problem := model_spec.parallel_problem(per_replica)):
            raise c.fail(f"stages.{stage.stage}.gpus_per_replica", problem)
    return Plan(
        name=c.name("name", doc.get("name", Path(path).stem)),
        path=path,
        model=model,
        stages=stages,
        slo=slo,
        traffic_scale=scale,
        description=""
        if doc.get("description") is None
        else c.text("description", doc["description"]),
        topology=topology,
        pd_link=_pd_link(c, doc.get("pd_link")),
        catalogs=catalogs.perf,
    )


def load_plan(
    path: str | Path,
    catalogs: PlanCatalogs | None = None,
    *,
    allow_outside_plan_dir: bool = False,
) -> Plan:
    """Load and check one plan file, and the engine files it names (the only file readers).

    Engine files must be inside the plan's folder unless ``allow_outside_plan_dir``.
    """
    return check_plan(
        str(path),
        load_yaml(path, PlanError),
        catalogs,
        allow_outside_plan_dir=allow_outside_plan_dir,
    )
