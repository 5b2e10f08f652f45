"""Read plan.yaml with the safe loader, check it against its schema and build the Plan.

kvadvisor.checker walks the document against kvadvisor.plan.schema and collects every problem,
each naming the file, line and key path, what is wrong and how to write it (unknown fields
and values get the closest known name, quantities must carry a unit of the right kind); the
builders here then look catalog names up and check what one key says against another,
recording their problems in the same checker. One PlanError lists them all.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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
from kvadvisor.checker import Checker, Field, Invalid, choice_problem, yaml_type
from kvadvisor.engines import registry
from kvadvisor.errors import CatalogError, PlanError
from kvadvisor.io.fileio import check_input
from kvadvisor.io.yamlio import MAX_YAML_BYTES, load_yaml_lines
from kvadvisor.plan.engine_files import (
    EngineFileError,
    merge_engine_settings,
    mooncake_bytes,
    read_engine_file,
)
from kvadvisor.plan.model import (
    STAGE_BLOCKS,
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
from kvadvisor.plan.schema import (
    INLINE_STORAGE_FIELDS,
    MAX_COUNT,
    MIN_TRAFFIC_SCALE,
    TIER_FIELDS,
    engine_fields,
    plan_fields,
)
from kvadvisor.quoting import one_line
from kvadvisor.units import (
    BITS_PER_BYTE,
    BYTES_PER_GB,
    BYTES_PER_GIB,
    BYTES_PER_MB,
    US_PER_S,
)
from kvadvisor.units.format import count
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


def named_tier(
    name: str, category: str, capacity_gib: float | None, devices: int, shared: bool
) -> TierPlan:
    """A tier by its storage option's name, left for the loader to resolve when read back.

    Its capacity is per instance, or for the whole stage when ``shared`` (a pool). Emit and the
    replay of a recommendation without a verdict both build their tiers this way.
    """
    return TierPlan(
        name=name,
        storage=StorageCapability(kind=CATEGORY_KINDS.get(category, "ssd"), catalog_name=name),
        capacity_bytes=None if capacity_gib is None else capacity_gib * BYTES_PER_GIB,
        devices=devices,
        shared=shared,
        scope="pooled" if shared else "instance",
    )


def storage_capability(spec: StorageSpec, device_bytes: float | None) -> StorageCapability:
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


def instance_resources(spec: InstanceSpec) -> tuple[float | None, float | None, float | None]:
    """A catalog instance's host memory (bytes), disk cap and P-to-D network (bytes/s)."""
    # KV crosses between prefill and decode over the GPU back-end (RDMA) network when the
    # instance has one (NIXL, Mooncake's transfer engine), else its front-end NIC.
    gbit = spec.backend_network_gbit or spec.frontend_network_gbit
    network = None if gbit is None else gbit * BYTES_PER_GB / BITS_PER_BYTE
    host_mem = None if spec.host_memory_gib is None else spec.host_memory_gib * BYTES_PER_GIB
    disk_cap = None if spec.disk_cap_mbps is None else spec.disk_cap_mbps * BYTES_PER_MB
    return host_mem, disk_cap, network


@lru_cache(maxsize=4)
def _engine_fields(engines: tuple[registry.Engine, ...]) -> dict[str, dict[str, Field]]:
    """Each registered engine's settings as checker fields, built once per set of engines."""
    table = _settings_table(engines)["engines"]
    return {e.name: engine_fields(e.name, table[e.name]["settings"]) for e in engines}


def _check_engine_settings(
    c: Checker, where: str, engine: str, settings: Mapping[str, Any], table: Mapping[str, Any]
) -> dict[str, Any]:
    """One engine's settings (from its files and the plan) against its documented table."""
    documented = table["engines"][engine]["settings"]
    out = c.record(where, dict(settings), _engine_fields(registry.engines())[engine])
    for key, value in out.items():
        if documented[key].get("kind") == "mooncake-size":
            size = mooncake_bytes(value)
            if size is None:
                c.add(
                    f"{where}.{key}",
                    f"expected whole bytes or a size such as '4 GB' (Mooncake: GiB), got {value!r}",
                )
            out[key] = size
    return out


def _tier(c: Checker, where: str, t: Mapping[str, Any], catalogs: PlanCatalogs) -> TierPlan | None:
    """One checked tier with its storage (a catalog name or an inline spec); None if broken."""
    capacity_bytes = t.get("capacity")
    devices = t.get("devices", 1)
    storage = t.get("storage")
    at = f"{where}.storage"
    spec: StorageSpec | None = None
    if storage is None:
        return None  # "is required": the schema said so
    if isinstance(storage, dict):
        s = c.record(at, storage, INLINE_STORAGE_FIELDS)
        if "kind" not in s:
            return None
        cap = StorageCapability(
            kind=s["kind"],
            read_bytes_per_s=s.get("read_bandwidth"),
            write_bytes_per_s=s.get("write_bandwidth"),
            read_iops=s.get("read_iops"),
            write_iops=s.get("write_iops"),
            latency_s=s.get("latency"),
        )
    else:
        name = c.value(at, Field("text", help=TIER_FIELDS["storage"].help), storage)
        spec = None if name is None else c.attempt(at, find_storage, catalogs.storage, name)
        if spec is None:
            return None
        per_device = None if capacity_bytes is None else capacity_bytes / devices
        cap = storage_capability(spec, per_device)
    shared = t.get("shared", cap.kind in ("pool", "filesystem", "object"))
    scope = t.get("scope", "pooled" if shared else "instance")
    if "shared" in t and "scope" in t and shared != (scope == "pooled"):
        c.add(
            f"{where}.scope",
            f"'{scope}' contradicts shared: {str(shared).lower()}; keep one of the two",
        )
    # A name the plan gave and the schema refused is said once; the default stands in.
    name = t.get("name") or c.value(f"{where}.name", Field("name"), cap.catalog_name or cap.kind)
    return TierPlan(
        name=name or cap.kind,
        storage=cap,
        capacity_bytes=capacity_bytes,
        devices=devices,
        shared=scope == "pooled",
        scope=scope,
        write_buffer_bytes=t.get("write_buffer"),
        on_full=t.get("on_full", "block"),
        io_tokens=t.get("io_tokens"),
        efficiency=t.get("efficiency"),
        spec=spec,
    )


@dataclass(frozen=True)
class _Hardware:
    """What a stage's instance (or its own keys) says: GPUs, memory, disk cap, network."""

    instance: str | None = None
    spec: InstanceSpec | None = None
    gpu: GpuSpec | None = None
    gpus: int | None = None
    host_memory_bytes: float | None = None
    disk_cap_bytes_per_s: float | None = None
    network_bytes_per_s: float | None = None


def _stage_hardware(
    c: Checker, where: str, s: Mapping[str, Any], catalogs: PlanCatalogs
) -> _Hardware:
    """The instance looked up in the catalog, then the stage's own keys over its figures."""
    hw = _Hardware()
    if "instance" in s:
        spec = c.attempt(f"{where}.instance", find_instance, catalogs.instances, s["instance"])
        if spec is not None:
            host_memory, disk_cap, network = instance_resources(spec)
            hw = _Hardware(
                instance=spec.name,
                spec=spec,
                # An instance whose GPU the GPU catalog lacks (B300, GB200) still loads: the
                # stage then has no performance model unless the plan names a catalog GPU.
                gpu=_gpu_or_none(catalogs.perf, spec.gpu),
                gpus=spec.gpu_count,
                host_memory_bytes=host_memory,
                disk_cap_bytes_per_s=disk_cap,
                network_bytes_per_s=network,
            )
    return replace(
        hw,
        gpu=c.attempt(f"{where}.gpu", catalogs.perf.gpu, s["gpu"]) if "gpu" in s else hw.gpu,
        gpus=s.get("gpus_per_instance", hw.gpus),
        host_memory_bytes=s.get("host_memory", hw.host_memory_bytes),
        disk_cap_bytes_per_s=s.get("disk_bandwidth_cap", hw.disk_cap_bytes_per_s),
    )


def _stage_engines(
    c: Checker,
    where: str,
    s: Mapping[str, Any],
    table: Mapping[str, Any],
    allow_outside_dir: bool,
) -> dict[str, dict[str, Any]]:
    """Engine settings read from the stage's engine files, the plan's own over them."""
    merged = _engine_files(c, f"{where}.engine_files", s.get("engine_files"), allow_outside_dir)
    inline_settings = s.get("engines", {})
    known = registry.names()
    c.unknown_keys(f"{where}.engines", inline_settings, known)
    for engine, inline in inline_settings.items():
        if engine not in known:
            continue
        if inline is not None and not isinstance(inline, dict):
            c.add(
                f"{where}.engines.{engine}",
                f"expected a mapping of settings, got {yaml_type(inline)}",
            )
            continue
        merged.setdefault(engine, {}).update(inline or {})
    return {
        e: _check_engine_settings(c, f"{where}.engines.{e}", e, settings, table)
        for e, settings in merged.items()
    }


def _stage_replicas(
    c: Checker, where: str, s: Mapping[str, Any], gpus: int | None, model_tp: int
) -> tuple[int, int, int]:
    """(instances, GPUs per replica, replicas per instance), each checked against the others."""
    per_replica = s.get("gpus_per_replica", model_tp)
    if gpus is not None and per_replica > gpus:
        c.add(
            f"{where}.gpus_per_replica",
            f"a replica of {per_replica} GPUs does not fit an instance of {gpus}; give at "
            f"most {gpus} (or a larger instance)",
        )
    n_instances = s.get("count", 1)
    replicas = s.get("replicas_per_instance", max((gpus or per_replica) // per_replica, 1))
    if "replicas_per_instance" in s and gpus is not None and replicas * per_replica > gpus:
        c.add(
            f"{where}.replicas_per_instance",
            f"{replicas} replicas of {per_replica} GPUs need {replicas * per_replica} GPUs; "
            f"the instance has {gpus}",
        )
    if n_instances * replicas > MAX_COUNT:
        # The replay holds arrays per replica: the bound is on replicas, not instances alone.
        c.add(
            f"{where}.count",
            f"{count(n_instances)} instances of {count(replicas)} replicas make "
            f"{count(n_instances * replicas)} replicas, more than the {count(MAX_COUNT)} a "
            "stage may have; give fewer instances",
        )
    return n_instances, per_replica, replicas


def _stage_tiers(
    c: Checker, where: str, s: Mapping[str, Any], catalogs: PlanCatalogs
) -> tuple[TierPlan, ...]:
    """The stage's tiers, fastest first, with unique names and a known decode_offload."""
    checked = [
        _tier(c, f"{where}.tiers[{i}]", t, catalogs) if t is not None else None
        for i, t in enumerate(s.get("tiers", []))
    ]
    tiers = tuple(t for t in checked if t is not None)
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        c.add(f"{where}.tiers", f"tier names must be unique, got {names}")
    offload = s.get("decode_offload")
    if offload is not None and len(tiers) == len(checked) and offload not in names:
        c.add(f"{where}.decode_offload", choice_problem(offload, names))
    return tiers


def _stage(
    c: Checker,
    name: Stage,
    s: Mapping[str, Any],
    catalogs: PlanCatalogs,
    table: Mapping[str, Any],
    model_tp: int = 1,
    allow_outside_dir: bool = False,
) -> StagePlan:
    """One checked stage block as a StagePlan: hardware, engines, replicas, tiers, policies."""
    where = f"stages.{name}"
    hw = _stage_hardware(c, where, s, catalogs)
    engines = _stage_engines(c, where, s, table, allow_outside_dir)
    n_instances, per_replica, replicas = _stage_replicas(c, where, s, hw.gpus, model_tp)
    fe = s.get("frontend", {})
    sch = s.get("scheduler", {})
    return StagePlan(
        stage=name,
        instance=hw.instance,
        gpu=hw.gpu,
        count=n_instances,
        gpus_per_instance=hw.gpus,
        host_memory_bytes=hw.host_memory_bytes,
        gpu_kv_pool_bytes=s.get("gpu_kv_pool"),
        disk_bandwidth_cap_bytes_per_s=hw.disk_cap_bytes_per_s,
        instance_spec=hw.spec,
        tiers=_stage_tiers(c, where, s, catalogs),
        engines=engines,
        engine_files=tuple(s.get("engine_files") or ()),
        chunk_tokens=s.get("chunk_tokens"),
        gpus_per_replica=per_replica,
        replicas_per_instance=replicas,
        scheduler=SchedulerPlan(
            max_num_batched_tokens=sch.get("max_num_batched_tokens"),
            max_num_seqs=sch.get("max_num_seqs"),
            page_tokens=sch.get("page_tokens"),
            preemption=sch.get("preemption"),
        ),
        router=s.get("router", "round_robin"),
        write_policy=s.get("write_policy"),
        kv_load=_kv_load(s.get("kv_load")),
        decode_offload=s.get("decode_offload"),
        save_decode_kv=s.get("save_decode_kv"),
        frontend_fixed_s=fe.get("fixed"),
        frontend_per_ki_token_s=fe.get("per_ki_token"),
        network_bytes_per_s=hw.network_bytes_per_s,
    )


def _kv_load(k: Mapping[str, Any] | None) -> KvLoadPlan | None:
    """How the stage loads KV from its tiers (None: the engine's own way)."""
    if k is None:
        return None
    return KvLoadPlan(
        mode=k.get("mode", "async"),
        prefetch_policy=k.get("prefetch_policy", "wait_complete"),
        prefetch_timeout_s=k.get("prefetch_timeout", 0.0),
        prefetch_timeout_per_ki_token_s=k.get("prefetch_timeout_per_ki_token", 0.0),
        min_tokens=k.get("min_tokens"),
    )


def _engine_files(
    c: Checker, where: str, names: list[str] | None, allow_outside_dir: bool
) -> dict[str, dict[str, Any]]:
    """Settings read back from the engine files a stage names (paths relative to the plan)."""
    out: dict[str, dict[str, Any]] = {}
    table = engine_settings_table()
    for i, name in enumerate(names or []):
        at = f"{where}[{i}]"
        try:
            text = _engine_file_text(c, at, name, allow_outside_dir)
            merge_engine_settings(out, read_engine_file(name, text, table))
        except Invalid:
            continue
        except (EngineFileError, ValueError) as exc:
            c.add(at, str(exc))
    return out


def _engine_file_text(c: Checker, at: str, name: str, allow_outside_dir: bool) -> str:
    """One engine file's text, through the same boundary as the plan itself.

    A plan under review may come from someone else (CI gating submitted plans), so what it
    names is read only when it is a regular file, no larger than a plan may be, UTF-8, and
    (unless the reviewer allows otherwise) inside the plan's folder once symlinks are
    resolved: a plan cannot make kvadvisor read /etc/shadow, hang on a FIFO or read
    /dev/zero forever.
    """
    base = Path(c.path).parent
    path = base / name
    if not allow_outside_dir:
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


def _model(c: Checker, m: Mapping[str, Any], catalogs: PlanCatalogs) -> ModelPlan:
    """The plan's model: a catalog model (looked up) and/or its KV bytes per token."""
    spec: ModelSpec | None = None
    if "name" in m:
        spec = c.attempt("model.name", catalogs.perf.model, m["name"])
    kvb = m.get("kv_bytes_per_token")
    if "name" not in m and kvb is None and not c.failed("model"):
        c.add("model", "give a catalog model name or kv_bytes_per_token")
    tp = m.get("tp", 1)
    if spec is not None and (problem := spec.parallel_problem(tp)):
        c.add("model.tp", problem)
    return ModelPlan(
        name=None if spec is None else spec.name,
        spec=spec,
        kv_bytes_per_token=kvb,
        tp=tp,
        kv_dtype=m.get("kv_dtype", "bf16"),
        weight_dtype=m.get("weight_dtype"),
    )


def _topology(c: Checker, doc: Mapping[str, Any], stages: Mapping[str, Any]) -> Topology:
    """Aggregated (one serving block) or disaggregated (prefill and/or decode blocks)."""
    if not stages and not c.failed("stages"):
        c.add("stages", "give prefill and/or decode, or one serving block (aggregated)")
    if Stage.SERVING in stages and len(stages) > 1:
        c.add(
            "stages.serving",
            "an aggregated fleet has one serving block; prefill and decode blocks describe a "
            "disaggregated one: keep one of the two forms",
        )
    topology = Topology.AGGREGATED if Stage.SERVING in stages else Topology.DISAGGREGATED
    given = doc.get("topology")
    if given is not None and given != topology and stages:
        fix = (
            "give one block stages.serving"
            if given == "aggregated"
            else "give stages.prefill and stages.decode"
        )
        c.add("topology", f"'{given}' does not match the stage blocks; {fix}")
    return topology


def _traffic_scale(c: Checker, doc: Mapping[str, Any]) -> float:
    """How much faster than recorded the trace's arrivals are replayed."""
    scale = float(doc.get("traffic", {}).get("scale", 1.0))
    if scale < MIN_TRAFFIC_SCALE:
        # Arrivals are divided by it: 1e-300 overflowed them, 1e-12 made demand series of
        # 10^14 windows.
        least, got = f"{MIN_TRAFFIC_SCALE:g}", f"{scale:g}"  # exact: as a plan spells it
        c.add("traffic.scale", f"must be at least {least} (a million times slower), got {got}")
    return scale


def _document_kind(value: Any) -> str:
    """What a whole document that is not a mapping holds, in the words of a YAML writer."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "text" if isinstance(value, str) else type(value).__name__


def check_plan(
    path: str,
    data: Any,
    catalogs: PlanCatalogs | None = None,
    *,
    allow_outside_plan_dir: bool = False,
    lines: Mapping[str, int] | None = None,
) -> Plan:
    """Check a parsed plan document and build the Plan; PlanError lists every problem.

    ``catalogs`` None means the packaged storage and instance catalogs. Engine files are
    read from the plan's folder only, unless ``allow_outside_plan_dir``. ``lines``: the line
    of each key path (kvadvisor.io.yamlio.load_yaml_lines), for the messages.
    """
    catalogs = catalogs or PlanCatalogs.packaged()
    table = engine_settings_table()
    fields = plan_fields()
    if not isinstance(data, dict):
        got = "an empty file" if data is None else _document_kind(data)
        raise PlanError(
            f"{path}: expected a mapping with keys {', '.join(fields)}, got {got}; "
            "see `kvadvisor docs review#the-plan-file` for the plan format"
        )
    c = Checker(path, lines)
    doc = c.record("", data, fields)
    model = _model(c, doc.get("model", {}), catalogs)
    stages_raw = doc.get("stages", {})
    topology = _topology(c, doc, stages_raw)
    stages = tuple(
        _stage(c, s, stages_raw[s], catalogs, table, model.tp, allow_outside_plan_dir)
        for s in STAGE_BLOCKS
        if s in stages_raw
    )
    for stage in stages:
        at = f"stages.{stage.stage}.gpus_per_replica"
        if model.spec is not None and (
            problem := model.spec.parallel_problem(stage.gpus_per_replica)
        ):
            c.add(at, problem)
    pd_link = doc.get("pd_link", {})
    plan = Plan(
        name=doc.get("name") or c.value("name", Field("name"), Path(path).stem) or "plan",
        path=path,
        model=model,
        stages=stages,
        slo=Slo(**{f"{k}_s": v for k, v in doc.get("slo", {}).items()}),
        traffic_scale=_traffic_scale(c, doc),
        description=doc.get("description", ""),
        topology=topology,
        pd_link=LinkPlan(
            bandwidth_bytes_per_s=pd_link.get("bandwidth"),
            efficiency=pd_link.get("efficiency"),
            latency_s=pd_link.get("latency", 0.0),
        ),
        catalogs=catalogs.perf,
    )
    c.raise_if_any(PlanError)
    return plan


def load_plan(
    path: str | Path,
    catalogs: PlanCatalogs | None = None,
    *,
    allow_outside_plan_dir: bool = False,
) -> Plan:
    """Load and check one plan file, and the engine files it names (the only file readers).

    Engine files must be inside the plan's folder unless ``allow_outside_plan_dir``.
    """
    data, lines = load_yaml_lines(path, PlanError)
    return check_plan(
        str(path), data, catalogs, allow_outside_plan_dir=allow_outside_plan_dir, lines=lines
    )
