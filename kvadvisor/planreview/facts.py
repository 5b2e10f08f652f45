"""The facts of a reviewed plan, scope by scope: what the review's rules read (pure).

One :class:`ScopeFacts` per plan, per stage, per tier of a stage and per engine on a stage,
each holding its own facts and those of the scopes around it (a tier sees its stage's and its
plan's). Names and meanings are registered in :mod:`kvadvisor.facts.review`; every name below is
a literal, so ``grep`` finds where a fact is made. A fact that cannot be known is absent, with
the reason the review gives for it ("the trace has no block hashes").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvadvisor.facts.registry import fact
from kvadvisor.plan.model import DISK_KINDS, Plan, StagePlan, TierPlan
from kvadvisor.planreview.demand import TierCalc, io_rate
from kvadvisor.results.common import IoRate
from kvadvisor.results.review import StageReview
from kvadvisor.results.vocab import Stage
from kvadvisor.rules.model import FactValue, Scope
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB, Unit, format_value

# The advisor's sizing target (kvadvisor.advice): p99 demand uses at most 80% of a tier.
TARGET_TIER_UTILIZATION = 0.8
PLACEHOLDER_MARK = "<FILL:"
LMCACHE_DEFAULT_CPU_GIB = 5.0  # lmcache/v1/config.py max_local_cpu_size default
MOONCAKE_DEFAULT_SEGMENT_BYTES = 3355443200  # mooncake_config.py DEFAULT_GLOBAL_SEGMENT_SIZE
MOONCAKE_DEFAULT_BUFFER_BYTES = 1 << 30  # mooncake_config.py DEFAULT_LOCAL_BUFFER_SIZE
MOONCAKE_CLIENT_REQUIRED = ("local_hostname", "metadata_server", "master_server_address")
# SGLang's defaults (python/sglang/srt/arg_groups/fields/memory.py@00fe477): host layout and
# I/O backend; releases before the arg_groups split defaulted to layer_first.
SGLANG_DEFAULT_LAYOUT = "page_first"
SGLANG_DEFAULT_IO_BACKEND = "kernel"
# kv_connector values vLLM ships (disagg_prefill.md), KVBM's and Mooncake's connectors.
VLLM_CONNECTORS = frozenset(
    {
        "NixlConnector",
        "LMCacheConnectorV1",
        "LMCacheMPConnector",
        "MultiConnector",
        "OffloadingConnector",
        "SimpleCPUOffloadConnector",
        "P2pNcclConnector",
        "ExampleConnector",
        "SharedStorageConnector",
        "MooncakeConnector",
        "MooncakeStoreConnector",
        "DynamoConnector",
    }
)
LOCAL_DISK_KINDS = ("ssd", "block")
MEMORY_KINDS = ("dram", "cxl")
NO_HASHES = "prefix reuse unknown: the trace has no block hashes"


@dataclass(frozen=True)
class ScopeFacts:
    """The facts one evaluation of the review's rules sees, and why any are absent.

    ``stage`` is the plan stage (``both`` for the plan scope); ``subject`` names the tier or
    the engine (empty for plan and stage), as the review's checks do.
    """

    scope: Scope
    stage: Stage
    subject: str
    facts: dict[str, FactValue]
    unavailable: dict[str, str] = field(default_factory=dict)


class _Facts:
    """Facts being gathered: values (None = absent) and the reasons for absent ones."""

    def __init__(self) -> None:
        self.values: dict[str, FactValue] = {}
        self.why: dict[str, str] = {}

    def add(self, name: str, value: Any, why: str | None = None) -> None:
        made = fact(name, value)
        if made is not None:
            self.values[name] = made
        elif why:
            self.why[name] = why

    def scope(self, scope: Scope, stage: Stage, subject: str, *outer: _Facts) -> ScopeFacts:
        facts: dict[str, FactValue] = {}
        why: dict[str, str] = {}
        for part in (*outer, self):
            facts.update(part.values)
            why.update(part.why)
        return ScopeFacts(scope, stage, subject, facts, why)


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
) -> _Facts:
    """Facts of the whole plan: SLO, the closed-loop replay, the two stages' storage."""
    f = _Facts()
    f.add("plan_name", plan.name)
    f.add("plan_tp", plan.model.tp)
    f.add("plan_disaggregated", "prefill" in stages and "decode" in stages)
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
            "prefill",
            "plan_prefill_storage_utilization_mean",
            "plan_prefill_storage_utilization_p99",
        ),
        ("decode", "plan_decode_storage_utilization_mean", "plan_decode_storage_utilization_p99"),
    ):
        u = by[Stage(stage)].utilization if Stage(stage) in by else None
        f.add(mean_name, None if u is None else u.mean, need)
        f.add(p99_name, None if u is None else u.p99, need)
    pre, dec = stages.get("prefill"), stages.get("decode")
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
    return f


# -- a stage ------------------------------------------------------------------------------------
def _connectors(config: Any) -> Iterator[dict[str, Any]]:
    """A --kv-transfer-config mapping and the connectors nested in a MultiConnector."""
    if not isinstance(config, dict):
        return
    yield config
    extra = config.get("kv_connector_extra_config")
    for child in (extra or {}).get("connectors", []) if isinstance(extra, dict) else []:
        yield from _connectors(child)


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


class _Settings:
    """One stage's engine settings and the figures they are sized against."""

    def __init__(self, stage: StagePlan, plan: Plan, pool: float | None) -> None:
        self.stage, self.plan, self.pool = stage, plan, pool
        self.ranks = stage.gpus_per_instance or plan.model.tp

    def get(self, engine: str, key: str, default: Any = None) -> Any:
        return self.stage.engines.get(engine, {}).get(key, default)

    def has(self, engine: str, key: str) -> bool:
        return key in self.stage.engines.get(engine, {})

    def tp(self, engine: str) -> int:
        key = {"vllm": "tensor-parallel-size", "sglang-hicache": "tp-size"}.get(engine)
        value = self.get(engine, key) if key else None
        if value is None and engine == "dynamo-kvbm":
            value = self.get("vllm", "tensor-parallel-size")
        return int(value or self.plan.model.tp)

    def replicas(self, engine: str) -> int:
        return max(1, self.ranks // self.tp(engine))

    def local_disk(self) -> TierPlan | None:
        return next((t for t in self.stage.tiers if t.storage.kind in LOCAL_DISK_KINDS), None)

    def shared_fs(self) -> TierPlan | None:
        return next((t for t in self.stage.tiers if t.storage.kind == "filesystem"), None)

    def layout(self) -> tuple[bool, str]:
        """Whether the engine moves KV to storage layer by layer, and the layout in words.

        LMCache: a chunk is one object per rank across all layers, unless ``use_layerwise``
        stores it layer by layer (LMCache configurations.rst). SGLang HiCache: its storage
        backends take whole pages: the file backend flattens a page across layers
        (``get_data_page``), and the mooncake backend needs page_first, to which SGLang
        switches a layer_first layout (arg_groups/hicache_hook.py). KVBM: blocks in its fully
        contiguous host and disk layout. Mooncake's store: one object per block hash
        (vllm-mooncakestoreconnector.md). vLLM alone (its native offloading): its KV cache is
        one tensor per layer, so a block moves as one copy per layer (vllm/v1 KV cache layout).
        """
        e = self.stage.engines
        if "lmcache" in e:
            if self.get("lmcache", "use_layerwise"):
                return True, "LMCache use_layerwise: one object per layer per rank"
            return False, "LMCache chunks: one object per chunk per rank, all layers"
        if "sglang-hicache" in e:
            layout = self.get("sglang-hicache", "hicache-mem-layout") or SGLANG_DEFAULT_LAYOUT
            return False, f"SGLang HiCache pages ({layout} host layout): a page holds every layer"
        if "dynamo-kvbm" in e:
            return False, "KVBM fully contiguous blocks: a block holds every layer"
        if "mooncake" in e:
            return False, "Mooncake store objects: one per block per rank, every layer"
        if "vllm" in e:
            return True, "vLLM paged KV: one tensor per layer, so one copy per layer per rank"
        return False, "no engine given: LMCache's default, one object per chunk per rank"


def _host_demand(s: _Settings, engine: str) -> tuple[float, str] | None:
    """Host bytes ``engine``'s settings take on one instance, and how (None: none set)."""
    g = s.get
    if (
        engine == "lmcache"
        and g(engine, "local_cpu", True) is not False
        and s.has(engine, "max_local_cpu_size")
    ):
        gib = float(g(engine, "max_local_cpu_size", LMCACHE_DEFAULT_CPU_GIB))
        return gib * BYTES_PER_GIB * s.ranks, f"max_local_cpu_size {gib:g} GiB x {s.ranks} ranks"
    if engine == "vllm":
        n = s.replicas(engine)
        if s.has(engine, "kv-offloading-size"):
            gib = float(g(engine, "kv-offloading-size"))
            return gib * BYTES_PER_GIB * n, f"kv-offloading-size {gib:g} GiB x {n} instances"
        cpu = [
            c["kv_connector_extra_config"]["cpu_bytes_to_use"]
            for c in _connectors(g(engine, "kv-transfer-config"))
            if c.get("kv_connector") == "OffloadingConnector"
            and "cpu_bytes_to_use" in (c.get("kv_connector_extra_config") or {})
        ]
        if cpu:
            return float(sum(cpu)) * n, (
                f"OffloadingConnector cpu_bytes_to_use {sum(cpu):,} B x {n} instances"
            )
    if engine == "dynamo-kvbm" and s.has(engine, "DYN_KVBM_CPU_CACHE_GB"):
        n = s.replicas(engine)
        gb = float(g(engine, "DYN_KVBM_CPU_CACHE_GB"))
        return gb * BYTES_PER_GB * n, f"DYN_KVBM_CPU_CACHE_GB {gb:g} x {n} instances"
    if engine == "mooncake" and (s.has(engine, "global_segment_size") or s.has(engine, "client")):
        store = float(g(engine, "global_segment_size", 0) if s.has(engine, "host") else 0)
        client = g(engine, "client", {}) or {}
        seg = client.get("global_segment_size", MOONCAKE_DEFAULT_SEGMENT_BYTES)
        buf = client.get("local_buffer_size", MOONCAKE_DEFAULT_BUFFER_BYTES)
        per = (seg if isinstance(seg, int) else 0) + (buf if isinstance(buf, int) else 0)
        return store + per * s.ranks, (
            f"store segment {format_value(store, Unit.BYTES)} + {s.ranks} client processes x "
            f"{format_value(per, Unit.BYTES)} (segment + buffer)"
        )
    return None


def _disk_demand(s: _Settings, engine: str) -> tuple[float, TierPlan | None, str] | None:
    """Disk bytes ``engine`` takes on one instance (or the pool), the tier, and how."""
    g = s.get
    if engine == "lmcache" and s.has(engine, "max_local_disk_size"):
        gib = float(g(engine, "max_local_disk_size"))
        return (
            gib * BYTES_PER_GIB * s.ranks,
            s.local_disk(),
            f"max_local_disk_size {gib:g} GiB x {s.ranks} ranks",
        )
    if engine == "dynamo-kvbm" and s.has(engine, "DYN_KVBM_DISK_CACHE_GB"):
        n = s.replicas(engine)
        gb = float(g(engine, "DYN_KVBM_DISK_CACHE_GB"))
        local = s.local_disk()
        if local is None and s.shared_fs() is not None:
            total = n * s.stage.count
            return (
                gb * BYTES_PER_GB * total,
                s.shared_fs(),
                f"DYN_KVBM_DISK_CACHE_GB {gb:g} x {total} instances sharing the file system",
            )
        return gb * BYTES_PER_GB * n, local, f"DYN_KVBM_DISK_CACHE_GB {gb:g} x {n} instances"
    if engine == "mooncake" and s.has(engine, "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"):
        limit = float(g(engine, "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"))
        return (
            limit,
            s.local_disk(),
            f"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES {limit:,.0f} per node",
        )
    return None


def _lmcache_facts(f: _Facts, s: _Settings) -> None:
    e = "lmcache"
    f.add("lmcache_configured", e in s.stage.engines)
    if e not in s.stage.engines:
        return
    chunk = int(s.get(e, "chunk_size", 256))
    if "sglang-hicache" in s.stage.engines:
        block, by = int(s.get("sglang-hicache", "page-size", 1)), "SGLang --page-size"
    else:
        block, by = int(s.get("vllm", "block-size", 16)), "vLLM --block-size"
    f.add("lmcache_chunk_tokens", chunk)
    f.add("engine_block_tokens", block)
    f.add("engine_block_from", by)
    f.add("lmcache_chunk_aligned", chunk % block == 0)
    l2 = s.get(e, "l2-adapter")
    fs_native = isinstance(l2, dict) and l2.get("type") == "fs_native"
    f.add("lmcache_fs_native", fs_native)
    if fs_native:
        f.add("lmcache_l2_capped", "max_capacity_gb" in l2)
        f.add("lmcache_l2_eviction_set", bool(l2.get("eviction")))
    f.add("lmcache_local_disk_set", bool(s.get(e, "local_disk")))
    f.add("lmcache_disk_size_set", bool(s.get(e, "max_local_disk_size")))
    f.add("lmcache_enable_pd", bool(s.get(e, "enable_pd")))
    url = s.get(e, "remote_url")
    f.add("lmcache_remote_url_set", url is not None)
    if url is not None:
        f.add("lmcache_remote_url", str(url))
        f.add("lmcache_remote_url_has_scheme", isinstance(url, str) and "://" in url)
    f.add("lmcache_save_decode_cache", bool(s.get(e, "save_decode_cache")))


def _kvbm_facts(f: _Facts, s: _Settings) -> None:
    e = "dynamo-kvbm"
    f.add("kvbm_configured", e in s.stage.engines)
    if e not in s.stage.engines:
        return
    cpu_gb, disk_gb = s.get(e, "DYN_KVBM_CPU_CACHE_GB"), s.get(e, "DYN_KVBM_DISK_CACHE_GB")
    f.add(
        "kvbm_cpu_cache_bytes",
        None if cpu_gb is None else float(cpu_gb) * BYTES_PER_GB,
        "DYN_KVBM_CPU_CACHE_GB is not set",
    )
    f.add(
        "kvbm_disk_cache_bytes",
        None if disk_gb is None else float(disk_gb) * BYTES_PER_GB,
        "no disk tier set (DYN_KVBM_DISK_CACHE_GB)",
    )
    # KVBM sizes per engine instance (its leader sums the TP workers' blocks): the device pool
    # it must cover is the instance's over its TP groups.
    tp = int(s.get("vllm", "tensor-parallel-size") or s.plan.model.tp)
    groups = max(1, s.ranks // tp)
    f.add("stage_tp_groups", groups)
    f.add(
        "kvbm_device_pool_bytes",
        None if s.pool is None else s.pool / groups,
        "the device KV pool is unknown (give gpu_kv_pool, or a catalog model and GPU)",
    )
    if disk_gb is not None:
        f.add("kvbm_disk_dir_set", bool(s.get(e, "DYN_KVBM_DISK_CACHE_DIR")))
        fs = s.shared_fs() if s.local_disk() is None else None
        f.add("kvbm_disk_on_filesystem", fs is not None)
        if fs is not None:
            f.add("kvbm_disk_tier_name", fs.name)
            f.add("kvbm_zerofill_fallback", bool(s.get(e, "DYN_KVBM_DISK_ZEROFILL_FALLBACK")))
    mode = s.get(e, "disaggregation-mode")
    if mode is not None:
        conn = s.get(e, "connector") or []
        f.add("kvbm_disaggregation_mode", str(mode))
        f.add("kvbm_nixl_connector", "nixl" in conn)
        f.add("kvbm_connectors", " ".join(conn) or "none")


def _sglang_facts(f: _Facts, s: _Settings) -> None:
    e = "sglang-hicache"
    f.add("sglang_configured", e in s.stage.engines)
    if e not in s.stage.engines:
        return
    g = s.get
    size_gb = g(e, "hicache-size", 0) or None
    ratio = g(e, "hicache-ratio", 2.0)
    per_rank_pool = s.pool / s.ranks if s.pool else None
    if size_gb is not None:
        ratio = (size_gb * BYTES_PER_GB / per_rank_pool) if per_rank_pool else None
    f.add(
        "sglang_host_to_device_ratio",
        ratio,
        "hicache-size is set but the device KV pool is unknown",
    )
    host_rank = (
        size_gb * BYTES_PER_GB
        if size_gb is not None
        else (ratio * per_rank_pool if per_rank_pool and ratio else None)
    )
    why = "needs the host pool size (hicache-size, or the device pool x ratio)"
    f.add("sglang_host_pool_bytes_per_rank", host_rank, why)
    f.add("sglang_host_pool_bytes", None if host_rank is None else host_rank * s.ranks, why)
    f.add("sglang_hicache_size_set", size_gb is not None)
    f.add("sglang_hicache_size_bytes_per_rank", None if size_gb is None else size_gb * BYTES_PER_GB)
    layout, backend = g(e, "hicache-mem-layout"), g(e, "hicache-storage-backend")
    f.add("sglang_mem_layout_set", layout is not None)
    f.add("sglang_mem_layout", layout or SGLANG_DEFAULT_LAYOUT)
    f.add("sglang_io_backend", g(e, "hicache-io-backend") or SGLANG_DEFAULT_IO_BACKEND)
    f.add("sglang_storage_backend_set", bool(backend))
    f.add("sglang_storage_backend", backend or "none")
    if backend == "file":
        d = g(e, "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR")
        f.add("sglang_file_backend_dir_set", bool(d))
        if d:
            f.add("sglang_file_backend_dir", d)
    f.add("sglang_decode_offload", bool(g(e, "disaggregation-decode-enable-offload-kvcache")))
    f.add("sglang_disaggregation_mode", g(e, "disaggregation-mode") or "null")
    f.add("sglang_hierarchical_cache_enabled", bool(g(e, "enable-hierarchical-cache")))


def _mooncake_facts(f: _Facts, s: _Settings) -> None:
    e = "mooncake"
    f.add("mooncake_configured", e in s.stage.engines)
    if e not in s.stage.engines:
        return
    g = s.get
    master = g(e, "master") or {}
    f.add("mooncake_root_fs_dir_set", bool(g(e, "root_fs_dir") or master.get("root_fs_dir")))
    f.add(
        "mooncake_offload_enabled",
        bool(g(e, "enable_offload", False) or master.get("enable_offload")),
    )
    f.add("mooncake_store_service", s.has(e, "host"))
    client = g(e, "client")
    f.add("mooncake_client_set", isinstance(client, dict))
    if isinstance(client, dict):
        missing = [k for k in MOONCAKE_CLIENT_REQUIRED if not str(client.get(k, "")).strip()]
        f.add("mooncake_client_missing_count", len(missing))
        f.add("mooncake_client_missing", ", ".join(missing) or "none")
    unset = [
        k
        for k in ("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES")
        if not s.has(e, k)
    ]
    f.add("mooncake_offload_unset_count", len(unset))
    f.add("mooncake_offload_unset", ", ".join(unset) or "none")
    ratio = g(e, "eviction_ratio", master.get("eviction_ratio"))
    if ratio is not None:
        f.add("mooncake_eviction_ratio", float(ratio))


def _vllm_facts(f: _Facts, s: _Settings) -> None:
    e = "vllm"
    if e not in s.stage.engines:
        return
    size, cfg = s.get(e, "kv-offloading-size"), s.get(e, "kv-transfer-config")
    f.add("vllm_offloading_size_set", size is not None)
    f.add("vllm_kv_transfer_config_set", cfg is not None)
    f.add("vllm_offloading_backend_set", s.has(e, "kv-offloading-backend"))
    if cfg is not None:
        names = [str(c.get("kv_connector")) for c in _connectors(cfg)]
        unknown = [n for n in names if n not in VLLM_CONNECTORS]
        f.add("vllm_connectors", ", ".join(names))
        f.add("vllm_unknown_connector_count", len(unknown))
        f.add("vllm_unknown_connectors", ", ".join(unknown) or "none")
    # Only both given can clash: `vllm serve` caps its default max_num_seqs at the token budget
    # (EngineArgs._set_default_args: min(default, max_num_batched_tokens)).
    if s.has(e, "max-num-batched-tokens") and s.has(e, "max-num-seqs"):
        tokens, seqs = int(s.get(e, "max-num-batched-tokens")), int(s.get(e, "max-num-seqs"))
        f.add("vllm_max_num_batched_tokens", tokens)
        f.add("vllm_max_num_seqs", seqs)
        f.add("vllm_batched_tokens_per_seq", tokens / seqs)
    if s.has(e, "gpu-memory-utilization"):
        f.add("vllm_gpu_memory_utilization", float(s.get(e, "gpu-memory-utilization")))


def stage_facts(
    plan: Plan,
    stage: StagePlan,
    pool: float | None,
    load_p99_s: float | None,
    replayed: bool,
) -> _Facts:
    """Facts of one stage: its instance, load time, KV layout on storage, engine settings."""
    f = _Facts()
    s = _Settings(stage, plan, pool)
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
    engine = "sglang-hicache" if "sglang-hicache" in stage.engines else "vllm"
    replica_tp = stage.gpus_per_replica or s.tp(engine)
    f.add("stage_kv_shard_ranks", 1 if spec is not None and spec.is_mla else replica_tp)
    f.add(
        "stage_model_layers",
        None if spec is None else spec.layers,
        "the model's layers are unknown (name a catalog model)",
    )
    _lmcache_facts(f, s)
    _kvbm_facts(f, s)
    _sglang_facts(f, s)
    _mooncake_facts(f, s)
    _vllm_facts(f, s)
    return f


def engine_facts(plan: Plan, stage: StagePlan, pool: float | None) -> list[tuple[str, _Facts]]:
    """Facts of each engine configured on the stage: host and disk it takes, placeholders, TP."""
    s = _Settings(stage, plan, pool)
    out = []
    for engine, settings in sorted(stage.engines.items()):
        f = _Facts()
        f.add("engine_name", engine)
        host = _host_demand(s, engine)
        if host is not None:
            f.add("engine_host_bytes_needed", host[0])
            f.add("engine_host_demand_how", host[1])
        disk = _disk_demand(s, engine)
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
        left = [p for p, v in _strings(settings, engine) if PLACEHOLDER_MARK in v]
        f.add("engine_placeholder_count", len(left))
        f.add("engine_placeholders", ", ".join(p.split(".", 1)[-1] for p in left) or "none")
        key = {"vllm": "tensor-parallel-size", "sglang-hicache": "tp-size"}.get(engine)
        if key is not None and s.has(engine, key):
            tp = int(s.get(engine, key))
            width = tp * (int(s.get(engine, "dp-size", 1)) if engine == "sglang-hicache" else 1)
            f.add("engine_tp", tp)
            f.add("engine_gpus_used", width)
        out.append((engine, f))
    return out


# -- a tier -------------------------------------------------------------------------------------
def _devices_for(devices: int, utilization: float | None, target: float) -> int | None:
    if utilization is None:
        return None
    return max(1, math.ceil(devices * utilization / target - 1e-9))


def _devices_for_capacity(tier: TierPlan) -> int:
    """Devices that hold the tier's capacity at the largest size the catalog sells per device."""
    spec = tier.spec
    if tier.capacity_bytes is None or spec is None:
        return tier.devices
    largest = None
    if spec.capacities_gb:
        largest = max(spec.capacities_gb) * BYTES_PER_GB
    elif spec.capacity_max_gib is not None:
        largest = spec.capacity_max_gib * BYTES_PER_GIB
    if not largest or spec.result_scope not in ("per_drive", "per_volume"):
        return tier.devices
    return max(1, math.ceil(tier.capacity_bytes / largest - 1e-9))


def tier_facts(
    stage: StagePlan,
    calc: TierCalc,
    stage_f: _Facts,
    kv_bytes_per_token: int,
    times_s: np.ndarray,
    span_s: float,
    window_s: float,
    replayed: bool = False,
) -> _Facts:
    """Facts of one tier: demand, capability and utilization, I/O size and rate, deployability.

    ``replayed``: the tier's demand is the closed-loop replay's; its I/O rates follow it.
    """
    f = _Facts()
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
        for q in ("mean", "p99", "peak"):
            f.add(f"tier_{direction}_bytes_per_s_{q}", demand[q], absent)
            f.add(f"tier_{direction}_utilization_{q}", util[q], missing)
        f.add(f"tier_{direction}_capability_bytes_per_s", cap, no_cap)
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
    for_p99 = _devices_for(t.devices, p99, TARGET_TIER_UTILIZATION)
    for_peak = _devices_for(t.devices, peak, 1.0)
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
    f: _Facts,
    stage: StagePlan,
    c: TierCalc,
    stage_f: _Facts,
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
        if per_page is None or io_bytes is None:
            f.add(f"tier_{direction}_iops_p99", None, why_layers)
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
        f.add(f"tier_{direction}_iops_p99", rate.p99_bytes_per_s)
        f.add(f"tier_{direction}_iops_peak", rate.peak_bytes_per_s)
        f.add(f"tier_{direction}_iops_capability", cap, no_iops)
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
    efficient = _ratio(s.write_bytes_per_s, s.write_iops) if s.write_iops else None
    f.add("tier_efficient_io_bytes", efficient, no_figs)
    f.add("tier_io_unit_bytes", unit, "the tier's I/O unit is not in the catalog")
    if io_bytes is not None and efficient is not None and s.write_bytes_per_s:
        assert s.write_iops is not None
        f.add("tier_io_bandwidth_share", min(1.0, s.write_iops * io_bytes / s.write_bytes_per_s))
    else:
        f.add("tier_io_bandwidth_share", None, why_layers if io_bytes is None else no_figs)
    if io_bytes is not None and unit:
        f.add("tier_write_amplification", math.ceil(io_bytes / unit) * unit / io_bytes)
    else:
        f.add("tier_write_amplification", None, "the tier's I/O unit is not in the catalog")


def all_scopes(
    plan_f: _Facts,
    stages: Iterable[tuple[StagePlan, _Facts, list[tuple[str, _Facts]], list[_Facts]]],
) -> list[ScopeFacts]:
    """Every evaluation's facts: the plan, then per stage its own, its engines', its tiers'."""
    out = [plan_f.scope(Scope.PLAN, Stage.BOTH, "")]
    for stage, sf, engines, tiers in stages:
        st = Stage(stage.stage)
        out.append(sf.scope(Scope.STAGE, st, "", plan_f))
        for tf in tiers:
            out.append(tf.scope(Scope.TIER, st, str(tf.values["tier_name"].value), plan_f, sf))
        for name, ef in engines:
            out.append(ef.scope(Scope.ENGINE, st, name, plan_f, sf))
    return out
