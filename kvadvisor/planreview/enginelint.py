"""Engine lint EL09-EL31: each setting `--emit` writes, checked the way the engine reads it.

Sizes are checked in the engine's own unit and scope against the plan's instance: per worker
process (LMCache), per engine instance (vLLM offloading, KVBM), per node (a Mooncake store
service). Ranks on an instance are its GPUs (``gpus_per_instance``, else the model's TP); an
engine instance (replica) is ``tp`` of them. A check whose keys are absent is not reported; one
whose keys are present but whose plan figures are missing says why (``skip``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvadvisor.plan.model import Plan, StagePlan, TierPlan
from kvadvisor.planreview.checks import capacity, check
from kvadvisor.results.review import ReviewCheck
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB

PLACEHOLDER_MARK = "<FILL:"
LMCACHE_DEFAULT_CPU_GIB = 5.0  # lmcache/v1/config.py max_local_cpu_size default
MOONCAKE_DEFAULT_SEGMENT_BYTES = 3355443200  # mooncake_config.py DEFAULT_GLOBAL_SEGMENT_SIZE
MOONCAKE_DEFAULT_BUFFER_BYTES = 1 << 30  # mooncake_config.py DEFAULT_LOCAL_BUFFER_SIZE
MOONCAKE_CLIENT_REQUIRED = ("local_hostname", "metadata_server", "master_server_address")
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


class _Lint:
    """One stage's settings and the figures the checks size against."""

    def __init__(self, stage: StagePlan, plan: Plan, pool: float | None) -> None:
        self.stage, self.plan, self.pool = stage, plan, pool
        self.st = stage.stage
        self.ranks = stage.gpus_per_instance or plan.model.tp
        self.out: list[ReviewCheck] = []

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

    def add(
        self,
        code: str,
        name: str,
        severity: str,
        ok: bool | None,
        msg: str,
        source: str,
        subject: str = "",
        **ev: Any,
    ) -> None:
        status = "skip" if ok is None else "pass" if ok else "fail"
        self.out.append(check(code, name, self.st, severity, status, msg, source, subject, **ev))

    def local_disk(self) -> TierPlan | None:
        return next((t for t in self.stage.tiers if t.storage.kind in LOCAL_DISK_KINDS), None)

    def shared_fs(self) -> TierPlan | None:
        return next((t for t in self.stage.tiers if t.storage.kind == "filesystem"), None)


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


def _host_demand(lint: _Lint, engine: str) -> tuple[float, str] | None:
    """Host bytes ``engine``'s settings take on one instance, and how (None: none set)."""
    g = lint.get
    if (
        engine == "lmcache"
        and g(engine, "local_cpu", True) is not False
        and lint.has(engine, "max_local_cpu_size")
    ):
        gib = float(g(engine, "max_local_cpu_size", LMCACHE_DEFAULT_CPU_GIB))
        return (
            gib * BYTES_PER_GIB * lint.ranks,
            f"max_local_cpu_size {gib:g} GiB x {lint.ranks} ranks",
        )
    if engine == "vllm":
        n = lint.replicas(engine)
        if lint.has(engine, "kv-offloading-size"):
            gib = float(g(engine, "kv-offloading-size"))
            return gib * BYTES_PER_GIB * n, f"kv-offloading-size {gib:g} GiB x {n} instances"
        cpu = [
            c["kv_connector_extra_config"]["cpu_bytes_to_use"]
            for c in _connectors(g(engine, "kv-transfer-config"))
            if c.get("kv_connector") == "OffloadingConnector"
            and "cpu_bytes_to_use" in (c.get("kv_connector_extra_config") or {})
        ]
        if cpu:
            return float(
                sum(cpu)
            ) * n, f"OffloadingConnector cpu_bytes_to_use {sum(cpu):,} B x {n} instances"
    if engine == "dynamo-kvbm" and lint.has(engine, "DYN_KVBM_CPU_CACHE_GB"):
        n = lint.replicas(engine)
        gb = float(g(engine, "DYN_KVBM_CPU_CACHE_GB"))
        return gb * BYTES_PER_GB * n, f"DYN_KVBM_CPU_CACHE_GB {gb:g} x {n} instances"
    if engine == "mooncake" and (
        lint.has(engine, "global_segment_size") or lint.has(engine, "client")
    ):
        store = float(g(engine, "global_segment_size", 0) if lint.has(engine, "host") else 0)
        client = g(engine, "client", {}) or {}
        seg = client.get("global_segment_size", MOONCAKE_DEFAULT_SEGMENT_BYTES)
        buf = client.get("local_buffer_size", MOONCAKE_DEFAULT_BUFFER_BYTES)
        per = (seg if isinstance(seg, int) else 0) + (buf if isinstance(buf, int) else 0)
        return store + per * lint.ranks, (
            f"store segment {capacity(store)} + {lint.ranks} client processes x "
            f"{capacity(per)} (segment + buffer)"
        )
    return None


def _disk_demand(lint: _Lint, engine: str) -> tuple[float, TierPlan | None, str] | None:
    """Disk bytes ``engine`` takes on one instance (or the pool), the tier, and how."""
    g = lint.get
    if engine == "lmcache" and lint.has(engine, "max_local_disk_size"):
        gib = float(g(engine, "max_local_disk_size"))
        return (
            gib * BYTES_PER_GIB * lint.ranks,
            lint.local_disk(),
            f"max_local_disk_size {gib:g} GiB x {lint.ranks} ranks",
        )
    if engine == "dynamo-kvbm" and lint.has(engine, "DYN_KVBM_DISK_CACHE_GB"):
        n = lint.replicas(engine)
        gb = float(g(engine, "DYN_KVBM_DISK_CACHE_GB"))
        local = lint.local_disk()
        if local is None and lint.shared_fs() is not None:
            total = n * lint.stage.count
            return (
                gb * BYTES_PER_GB * total,
                lint.shared_fs(),
                f"DYN_KVBM_DISK_CACHE_GB {gb:g} x {total} instances sharing the file system",
            )
        return gb * BYTES_PER_GB * n, local, f"DYN_KVBM_DISK_CACHE_GB {gb:g} x {n} instances"
    if engine == "mooncake" and lint.has(engine, "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"):
        limit = float(g(engine, "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"))
        return (
            limit,
            lint.local_disk(),
            f"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES {limit:,.0f} per node",
        )
    return None


def _capacity_checks(lint: _Lint) -> None:
    """EL09 host memory and EL10 disk capacity, per engine present."""
    host = lint.stage.host_memory_bytes
    for engine in sorted(lint.stage.engines):
        demand = _host_demand(lint, engine)
        if demand is not None:
            need, how = demand
            ok = None if host is None else need <= host
            msg = (
                f"{how} = {capacity(need)} of host memory per instance"
                + ("" if host is None else f" against {capacity(host)}")
                + (
                    ": the instance's host memory is unknown (give instance or host_memory)"
                    if host is None
                    else ""
                )
                + (": the engine would be OOM-killed or fail to pin memory" if ok is False else "")
            )
            lint.add(
                "EL09",
                "engine.host_memory",
                "error",
                ok,
                msg,
                "host_scope",
                engine,
                host_bytes_needed=need,
                host_memory_bytes=host,
            )
        disk = _disk_demand(lint, engine)
        if disk is not None:
            need, tier, how = disk
            cap = None if tier is None else tier.capacity_bytes
            ok = None if cap is None else need <= cap
            msg = (
                f"{how} = {capacity(need)}"
                + (
                    f" against {tier.name}'s {capacity(cap)}"
                    if tier is not None and cap is not None
                    else ": no bounded disk tier in the plan to hold it"
                )
                + (": the disk fills before the engine's bound is reached" if ok is False else "")
            )
            lint.add(
                "EL10",
                "engine.disk_capacity",
                "error",
                ok,
                msg,
                "disk_scope",
                engine,
                disk_bytes_needed=need,
                disk_capacity_bytes=cap,
            )


def _placeholders(lint: _Lint) -> None:
    """EL11: a value still holding a <FILL:...> marker."""
    for engine, settings in sorted(lint.stage.engines.items()):
        left = [(p, v) for p, v in _strings(settings, engine) if PLACEHOLDER_MARK in v]
        if left:
            lint.add(
                "EL11",
                "engine.placeholder",
                "warning",
                False,
                f"{len(left)} value(s) still to fill before starting: "
                + ", ".join(p.split(".", 1)[-1] for p, _ in left),
                "placeholder",
                engine,
                placeholders=[p for p, _ in left],
            )


def _parallelism(lint: _Lint) -> None:
    """EL12: an engine's TP x replicas against the instance's GPUs and the plan's TP."""
    gpus = lint.stage.gpus_per_instance
    for engine, key, width in (
        ("vllm", "tensor-parallel-size", lambda: int(lint.get("vllm", "tensor-parallel-size"))),
        (
            "sglang-hicache",
            "tp-size",
            lambda: (
                int(lint.get("sglang-hicache", "tp-size"))
                * int(lint.get("sglang-hicache", "dp-size", 1))
            ),
        ),
    ):
        if not lint.has(engine, key):
            continue
        tp, used = int(lint.get(engine, key)), width()
        if gpus is not None and used > gpus:
            lint.add(
                "EL12",
                "engine.parallelism",
                "error",
                False,
                f"{engine} uses {used} GPUs per instance but the instance has {gpus}",
                "parallelism",
                engine,
                gpus_used=used,
                gpus_per_instance=gpus,
            )
        elif tp != lint.plan.model.tp:
            lint.add(
                "EL12",
                "engine.parallelism",
                "warning",
                False,
                f"{engine} runs TP {tp} but the plan's model.tp is {lint.plan.model.tp}: the KV "
                "pool and per-rank sizes are reviewed at the plan's TP",
                "parallelism",
                engine,
                engine_tp=tp,
                plan_tp=lint.plan.model.tp,
            )
        else:
            lint.add(
                "EL12",
                "engine.parallelism",
                "error",
                True,
                f"{engine} TP {tp}, {used} GPUs per instance"
                + ("" if gpus is None else f" of {gpus}"),
                "parallelism",
                engine,
            )


def _lmcache(lint: _Lint) -> None:
    e = "lmcache"
    if e not in lint.stage.engines:
        return
    path, size = lint.get(e, "local_disk"), lint.get(e, "max_local_disk_size")
    if path is not None or size is not None:
        bad = bool(path) != bool(size)
        lint.add(
            "EL13",
            "lmcache.disk_path_size",
            "error",
            not bad,
            "local_disk and max_local_disk_size "
            + (
                "go together"
                if not bad
                else "must be set together: a disk path with size 0 (the default) keeps "
                "nothing, a size without a path has no disk"
            ),
            "lmcache_conf",
            local_disk=path,
            max_local_disk_size=size,
        )
    if lint.get(e, "enable_pd"):
        bad_keys = [k for k in ("remote_url",) if lint.get(e, k)] + (
            ["save_decode_cache"] if lint.get(e, "save_decode_cache") else []
        )
        lint.add(
            "EL14",
            "lmcache.pd_restrictions",
            "error",
            not bad_keys,
            "LMCache PD mode "
            + (
                "forbids " + " and ".join(bad_keys)
                if bad_keys
                else "has no remote backend and no decode saving, as it requires"
            ),
            "lmcache_conf",
            conflicting=bad_keys,
        )
    url = lint.get(e, "remote_url")
    if url is not None:
        ok = isinstance(url, str) and "://" in url
        lint.add(
            "EL15",
            "lmcache.remote_url",
            "error",
            ok,
            f"remote_url {url!r} " + ("has a scheme" if ok else "is not protocol://host:port/path"),
            "lmcache_conf",
            remote_url=url,
        )


def _vllm(lint: _Lint) -> None:
    e = "vllm"
    if e not in lint.stage.engines:
        return
    size, cfg = lint.get(e, "kv-offloading-size"), lint.get(e, "kv-transfer-config")
    if size is not None and cfg is not None:
        kinds = [c.get("kv_connector") for c in _connectors(cfg)]
        lint.add(
            "EL16",
            "vllm.offload_replaces_connector",
            "error",
            False,
            f"kv-offloading-size replaces the kv-transfer-config connector "
            f"({', '.join(map(str, kinds))}) with OffloadingConnector: put OffloadingConnector "
            "in a MultiConnector instead",
            "vllm_offload",
            connectors=kinds,
        )
    elif size is not None or cfg is not None:
        lint.add(
            "EL16",
            "vllm.offload_replaces_connector",
            "error",
            True,
            "one way to configure KV connectors (kv-offloading-size or kv-transfer-config)",
            "vllm_offload",
        )
    if lint.has(e, "kv-offloading-backend"):
        ok = size is not None
        lint.add(
            "EL17",
            "vllm.offload_backend_without_size",
            "warning",
            ok,
            "kv-offloading-backend "
            + (
                "with kv-offloading-size"
                if ok
                else "without kv-offloading-size: offloading stays off"
            ),
            "vllm_offload",
        )
    # Only both given can clash: `vllm serve` caps its default max_num_seqs at the token budget
    # (EngineArgs._set_default_args: min(default, max_num_batched_tokens)).
    if lint.has(e, "max-num-batched-tokens") and lint.has(e, "max-num-seqs"):
        tokens, seqs = (
            int(lint.get(e, "max-num-batched-tokens")),
            int(lint.get(e, "max-num-seqs")),
        )
        lint.add(
            "EL18",
            "vllm.batched_tokens_below_seqs",
            "error",
            tokens >= seqs,
            f"max-num-batched-tokens {tokens} against max-num-seqs {seqs}"
            + ("" if tokens >= seqs else ": vLLM refuses to start"),
            "vllm_sched",
            max_num_batched_tokens=tokens,
            max_num_seqs=seqs,
        )
    if lint.has(e, "gpu-memory-utilization"):
        u = float(lint.get(e, "gpu-memory-utilization"))
        lint.add(
            "EL19",
            "vllm.gpu_memory_utilization",
            "error",
            0 < u <= 1,
            f"gpu-memory-utilization {u:g} "
            + ("within (0, 1]" if 0 < u <= 1 else "outside (0, 1]"),
            "vllm_cache",
            gpu_memory_utilization=u,
        )
    if cfg is not None:
        names = [c.get("kv_connector") for c in _connectors(cfg)]
        unknown = [n for n in names if n not in VLLM_CONNECTORS]
        lint.add(
            "EL20",
            "vllm.unknown_connector",
            "error",
            not unknown,
            "kv_connector "
            + (
                ", ".join(map(str, names))
                if not unknown
                else f"{', '.join(map(str, unknown))} is not a connector vLLM, Dynamo or "
                "Mooncake registers"
            ),
            "vllm_connectors",
            connectors=names,
        )


def _sglang(lint: _Lint) -> None:
    e = "sglang-hicache"
    if e not in lint.stage.engines:
        return
    g = lint.get
    backend, layout, io = (
        g(e, "hicache-storage-backend"),
        g(e, "hicache-mem-layout"),
        g(e, "hicache-io-backend"),
    )
    if layout is not None or backend is not None:
        layout = layout or "page_first"
        io = io or "kernel"
        problem = None
        severity = "error"
        if backend == "mooncake" and not layout.startswith("page_first"):
            problem = f"the mooncake backend needs page_first or page_first_direct, not {layout}"
        elif layout == "page_first" and io != "kernel":
            problem, severity = (
                f"page_first with the {io} I/O backend falls back to layer_first",
                "warning",
            )
        elif layout == "page_first_direct" and io != "direct":
            problem, severity = (
                f"page_first_direct is built for the direct I/O backend, not {io}",
                "warning",
            )
        lint.add(
            "EL21",
            "sglang.layout_backend",
            severity,
            problem is None,
            problem
            or f"host layout {layout} with the {io} I/O backend"
            + (f" and the {backend} backend" if backend else ""),
            "sglang_layout",
            layout=layout,
            io_backend=io,
            storage_backend=backend,
        )
    size = g(e, "hicache-size")
    if size and lint.pool:
        device_rank = lint.pool / lint.ranks
        ok = size * BYTES_PER_GB > device_rank
        lint.add(
            "EL22",
            "sglang.host_pool_not_above_device",
            "error",
            ok,
            f"host pool {size:g} GB per rank against a device pool of "
            f"{capacity(device_rank)} per rank"
            + ("" if ok else ": HiCache refuses to start (host pool must be larger)"),
            "sglang_host",
            host_pool_bytes_per_rank=size * BYTES_PER_GB,
            device_pool_bytes_per_rank=device_rank,
        )
    if backend == "file":
        d = g(e, "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR")
        lint.add(
            "EL23",
            "sglang.file_backend_dir",
            "warning",
            bool(d),
            f"file backend in {d}; it has no size bound of its own: give it a volume of its own"
            if d
            else "file backend without SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR writes to "
            "/tmp/hicache, usually the root disk",
            "sglang_file",
            directory=d,
        )
    if g(e, "disaggregation-decode-enable-offload-kvcache"):
        why = []
        if g(e, "disaggregation-mode") != "decode":
            why.append("only a decode server (--disaggregation-mode decode) offloads")
        if not backend:
            why.append("there is no storage backend to offload to")
        lint.add(
            "EL24",
            "sglang.decode_offload",
            "error",
            not why,
            "; ".join(why) or "decode offloads finished turns to the shared L3",
            "sglang_disagg",
        )
    if (size or backend) and g(e, "disaggregation-mode") != "decode":
        ok = bool(g(e, "enable-hierarchical-cache"))
        lint.add(
            "EL25",
            "sglang.hicache_not_enabled",
            "warning",
            ok,
            "HiCache "
            + ("enabled" if ok else "settings without --enable-hierarchical-cache have no effect"),
            "sglang_layout",
        )


def _kvbm(lint: _Lint) -> None:
    e = "dynamo-kvbm"
    if e not in lint.stage.engines:
        return
    g = lint.get
    if lint.has(e, "DYN_KVBM_DISK_CACHE_GB"):
        d = g(e, "DYN_KVBM_DISK_CACHE_DIR")
        lint.add(
            "EL26",
            "kvbm.disk_dir_default",
            "warning",
            bool(d),
            f"disk cache in {d}"
            if d
            else "DYN_KVBM_DISK_CACHE_GB without DYN_KVBM_DISK_CACHE_DIR writes to /tmp",
            "kvbm_dir",
            directory=d,
        )
        fs = lint.shared_fs() if lint.local_disk() is None else None
        if fs is not None:
            ok = bool(g(e, "DYN_KVBM_DISK_ZEROFILL_FALLBACK"))
            lint.add(
                "EL27",
                "kvbm.fs_without_zerofill",
                "warning",
                ok,
                f"the disk tier is the file system {fs.name}"
                + (
                    "; zero-fill fallback on"
                    if ok
                    else ": without DYN_KVBM_DISK_ZEROFILL_FALLBACK, fallocate() fails on file "
                    "systems such as Lustre and KVBM does not start"
                ),
                "kvbm_lustre",
                tier=fs.name,
            )
    if g(e, "disaggregation-mode") == "prefill":
        conn = g(e, "connector") or []
        ok = "nixl" in conn
        lint.add(
            "EL28",
            "kvbm.prefill_without_nixl",
            "error",
            ok,
            f"prefill worker connectors {' '.join(conn) or 'none'}"
            + ("" if ok else ": without nixl the prompt's KV never reaches decode"),
            "kvbm_connector",
            connector=conn,
        )


def _mooncake(lint: _Lint) -> None:
    e = "mooncake"
    if e not in lint.stage.engines:
        return
    g = lint.get
    client = g(e, "client")
    if isinstance(client, dict):
        missing = [k for k in MOONCAKE_CLIENT_REQUIRED if not str(client.get(k, "")).strip()]
        lint.add(
            "EL29",
            "mooncake.client_required",
            "error",
            not missing,
            "client configuration "
            + (
                f"lacks {', '.join(missing)}"
                if missing
                else "has local_hostname, metadata_server and master_server_address"
            ),
            "mooncake_client",
            missing=missing,
        )
    if g(e, "enable_offload") and lint.has(e, "host"):
        unset = [
            k
            for k in (
                "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH",
                "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES",
            )
            if not lint.has(e, k)
        ]
        lint.add(
            "EL30",
            "mooncake.offload_defaults",
            "warning",
            not unset,
            "SSD offload "
            + (
                f"without {', '.join(unset)}: /data/file_storage and 2 TB by default"
                if unset
                else "has its path and its bound"
            ),
            "mooncake_ssd",
            unset=unset,
        )
    ratio = g(e, "eviction_ratio", (g(e, "master") or {}).get("eviction_ratio"))
    if ratio is not None:
        r = float(ratio)
        lint.add(
            "EL31",
            "mooncake.eviction_ratio",
            "error",
            0 <= r <= 1,
            f"eviction_ratio {r:g} "
            + ("within [0, 1]" if 0 <= r <= 1 else "outside [0, 1]: mooncake_master exits"),
            "mooncake_master",
            eviction_ratio=r,
        )


def engine_lint(stage: StagePlan, plan: Plan, pool: float | None) -> list[ReviewCheck]:
    """EL09-EL31 on one stage's engine settings; ``pool`` is its device KV pool in bytes."""
    lint = _Lint(stage, plan, pool)
    _capacity_checks(lint)
    _placeholders(lint)
    _parallelism(lint)
    _lmcache(lint)
    _vllm(lint)
    _sglang(lint)
    _kvbm(lint)
    _mooncake(lint)
    return lint.out
