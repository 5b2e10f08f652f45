"""A stage's engine settings as facts: what the engine lint (rules/lint/) reads.

Sizes are checked in the engine's own unit and scope against the plan's instance: per worker
process (LMCache), per engine instance (vLLM offloading, KVBM), per node (a Mooncake store
service). Ranks on an instance are its GPUs (``gpus_per_instance``, else the model's TP); an
engine instance (replica) is ``tp`` of them. A setting absent from the plan is an absent fact,
so the rules that need it do not apply.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvadvisor.plan.model import Plan, StagePlan, TierPlan
from kvadvisor.planreview.scope import FactSet
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB, Unit, format_value, plural
from kvadvisor.units.format import as_written, count

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
        """The TP ``engine`` runs (its own setting, else the stage's, else the model's)."""
        key = {"vllm": "tensor-parallel-size", "sglang-hicache": "tp-size"}.get(engine)
        value = self.get(engine, key) if key else None
        if value is None and engine == "dynamo-kvbm":
            value = self.get("vllm", "tensor-parallel-size")
        return int(value or self.stage_tp)

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


def _host_demand(s: EngineSettings, engine: str) -> tuple[float, str] | None:
    """Host bytes ``engine``'s settings take on one instance, and how (None: none set)."""
    g = s.get
    if (
        engine == "lmcache"
        and g(engine, "local_cpu", True) is not False
        and s.has(engine, "max_local_cpu_size")
    ):
        gib = float(g(engine, "max_local_cpu_size", LMCACHE_DEFAULT_CPU_GIB))
        how = f"max_local_cpu_size {as_written(gib)} GiB x {plural(s.ranks, 'rank')}"
        return gib * BYTES_PER_GIB * s.ranks, how
    if engine == "vllm":
        n = s.replicas(engine)
        if s.has(engine, "kv-offloading-size"):
            gib = float(g(engine, "kv-offloading-size"))
            how = f"kv-offloading-size {as_written(gib)} GiB x {plural(n, 'instance')}"
            return gib * BYTES_PER_GIB * n, how
        cpu = [
            c["kv_connector_extra_config"]["cpu_bytes_to_use"]
            for c in _connectors(g(engine, "kv-transfer-config"))
            if c.get("kv_connector") == "OffloadingConnector"
            and "cpu_bytes_to_use" in (c.get("kv_connector_extra_config") or {})
        ]
        if cpu:
            return float(sum(cpu)) * n, (
                f"OffloadingConnector cpu_bytes_to_use {count(sum(cpu))} B "
                f"x {plural(n, 'instance')}"
            )
    if engine == "dynamo-kvbm" and s.has(engine, "DYN_KVBM_CPU_CACHE_GB"):
        n = s.replicas(engine)
        gb = float(g(engine, "DYN_KVBM_CPU_CACHE_GB"))
        how = f"DYN_KVBM_CPU_CACHE_GB {as_written(gb)} x {plural(n, 'instance')}"
        return gb * BYTES_PER_GB * n, how
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


def _disk_demand(s: EngineSettings, engine: str) -> tuple[float, TierPlan | None, str] | None:
    """Disk bytes ``engine`` takes on one instance (or the pool), the tier, and how."""
    g = s.get
    if engine == "lmcache" and s.has(engine, "max_local_disk_size"):
        gib = float(g(engine, "max_local_disk_size"))
        return (
            gib * BYTES_PER_GIB * s.ranks,
            s.local_disk(),
            f"max_local_disk_size {as_written(gib)} GiB x {plural(s.ranks, 'rank')}",
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
                f"DYN_KVBM_DISK_CACHE_GB {as_written(gb)} x {plural(total, 'instance')} sharing "
                "the file system",
            )
        how = f"DYN_KVBM_DISK_CACHE_GB {as_written(gb)} x {plural(n, 'instance')}"
        return gb * BYTES_PER_GB * n, local, how
    if engine == "mooncake" and s.has(engine, "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"):
        limit = float(g(engine, "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"))
        return (
            limit,
            s.local_disk(),
            f"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES {count(limit)} per node",
        )
    return None


def _lmcache_facts(f: FactSet, s: EngineSettings) -> None:
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


def _kvbm_facts(f: FactSet, s: EngineSettings) -> None:
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
    tp = int(s.get("vllm", "tensor-parallel-size") or s.stage_tp)
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


def _sglang_facts(f: FactSet, s: EngineSettings) -> None:
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


def _mooncake_facts(f: FactSet, s: EngineSettings) -> None:
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


def _vllm_facts(f: FactSet, s: EngineSettings) -> None:
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


def settings_facts(f: FactSet, s: EngineSettings) -> None:
    """Every engine's settings on the stage as facts (absent where not set)."""
    _lmcache_facts(f, s)
    _kvbm_facts(f, s)
    _sglang_facts(f, s)
    _mooncake_facts(f, s)
    _vllm_facts(f, s)


def engine_facts(plan: Plan, stage: StagePlan, pool: float | None) -> list[tuple[str, FactSet]]:
    """Facts of each engine configured on the stage: host and disk it takes, placeholders, TP."""
    s = EngineSettings(stage, plan, pool)
    out = []
    for engine, settings in sorted(stage.engines.items()):
        f = FactSet()
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
