"""The review's checks: how one is built, the sources they cite, and the engine lint.

The engine lint (EL01-EL07 here, EL09-EL31 in :mod:`kvadvisor.advise.engine_lint`) judges an
engine's settings against its documentation and needs the plan only; the checks that need the
trace replayed (RV01-RV08, EL08) live in :mod:`kvadvisor.advise.review`.
"""

from __future__ import annotations

from typing import Any

from kvadvisor.advise.model import ReviewCheck
from kvadvisor.plan.model import Plan, StagePlan
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_KB, BYTES_PER_MB, BYTES_PER_TB

HICACHE_MIN_RATIO = 2.0  # SGLang hicache_design.md: host pool at least twice the device pool

SOURCES = {
    "design": "DESIGN.md definitions (prefix hit, write and read demand)",
    "cause1": "DESIGN.md, underutilization cause 1 (sized for the peak, run at the average)",
    "cause2": "DESIGN.md, underutilization cause 2 (the stage time split ignored)",
    "loadrecompute": "DESIGN.md load vs recompute; Mooncake FAST'25 break-even; dynamo #6101",
    "kvbm": "ai-dynamo/dynamo kvbm-guide.md (PR #6506): CPU cache >= device pool, DISK >= CPU; "
    "both per engine instance (lib/llm/src/block_manager/distributed/leader.rs@ae2223b)",
    "hicache_ratio": "sgl-project/sglang hicache_design.md: --hicache-ratio minimum 2",
    "hicache_mem": "sglang #5372, bytedance-iaas/sglang #744: host pools over host memory OOM",
    "lmcache_chunk": "LMCache configurations.rst chunk_size; LMCache #4782, #5217 (KV geometry)",
    "lmcache_fs": "LMCache #4725: fs_native max_capacity_gb without eviction grows past the cap",
    "mooncake_fs": "Mooncake deployment guide: do not combine --root_fs_dir with --enable_offload",
    "ssd_bound": "LMCache #4725, Mooncake #924: a disk tier without a bound fills the disk",
    "slo": "the plan's SLO; load time = latency + bytes / read bandwidth per tier",
    "placeholder": "kvadvisor --emit: <FILL:...> marks an address, mount or device to supply",
    "host_scope": "per-rank and per-instance sizes: LMCache local_cpu_backend.py (GiB per worker), "
    "vLLM vllm/config/cache.py@002f10e (GiB per instance), Dynamo leader.rs@ae2223b (GB per "
    "instance), Mooncake real_client_main.cpp@3b5a594 and mooncake_config.py (bytes per "
    "node, per process)",
    "disk_scope": "LMCache local_disk_backend.py@005121a (GiB per worker), Dynamo "
    "leader.rs@ae2223b (GB per instance), Mooncake ssd-offload.md@3b5a594 (bytes per node)",
    "parallelism": "vLLM vllm/config/parallel.py@00193b8; SGLang "
    "arg_groups/fields/parallel.py@00ac710",
    "lmcache_conf": "LMCache docs/source/api_reference/configurations.rst@0223da8 and "
    "lmcache/v1/config.py@000620e",
    "vllm_offload": "vLLM vllm/config/cache.py@002f10e (offloading only with kv_offloading_size) "
    "and vllm/config/vllm.py _post_init_kv_transfer_config (replaces kv_connector)",
    "vllm_sched": "vLLM vllm/config/scheduler.py@01230b4 (max_num_batched_tokens >= max_num_seqs)",
    "vllm_cache": "vLLM vllm/config/cache.py@002f10e (gpu_memory_utilization in (0, 1])",
    "vllm_connectors": "vLLM docs/features/disagg_prefill.md@0047fb9 and "
    "vllm/config/vllm.py; Mooncake vllm-mooncakestoreconnector.md@3b5a594",
    "sglang_layout": "SGLang hicache_best_practices.md@0712681 (page_first needs the kernel I/O "
    "backend); Mooncake hicache-integration-v1.md@3b5a594 (mooncake needs page_first*)",
    "sglang_host": "SGLang mem_cache/memory_pool_host.py: the host pool must be larger than the "
    "device pool (asserted at start)",
    "sglang_file": "SGLang mem_cache/hicache_storage.py@bb424de (HiCacheFile defaults to "
    "/tmp/hicache)",
    "sglang_disagg": "SGLang arg_groups/fields/disagg.py@07a7b67; "
    "hicache_best_practices.md@0712681",
    "kvbm_dir": "Dynamo lib/kvbm-config/src/v1_compat.rs@5954806; KVBM docs (default /tmp)",
    "kvbm_lustre": "Dynamo docs/components/kvbm/kvbm-guide.md@839750d (fallocate-less file "
    "systems)",
    "kvbm_connector": "Dynamo examples/backends/vllm/launch/disagg_kvbm.sh@e225d48",
    "mooncake_client": "Mooncake mooncake-wheel/mooncake/mooncake_config.py@3b5a594 (required "
    "keys)",
    "mooncake_ssd": "Mooncake docs/source/deployment/ssd/ssd-offload.md@3b5a594 (defaults "
    "/data/file_storage and 2 TB)",
    "mooncake_master": "Mooncake mooncake-store/src/master.cpp@3b5a594 (eviction_ratio in [0, 1])",
}


def check(
    code: str,
    name: str,
    stage: str,
    severity: str,
    status: str,
    message: str,
    source: str,
    subject: str = "",
    **evidence: Any,
) -> ReviewCheck:
    """A ReviewCheck citing ``SOURCES[source]``; keyword arguments are its evidence."""
    return ReviewCheck(
        code, name, stage, severity, status, message, evidence, SOURCES[source], subject
    )


def fmt_bytes(nbytes: float | None) -> str:
    """Decimal bytes with a readable prefix ("1.5 TB", "320 KB"); None is unbounded."""
    if nbytes is None:
        return "unbounded"
    for unit, size in (
        ("TB", BYTES_PER_TB),
        ("GB", BYTES_PER_GB),
        ("MB", BYTES_PER_MB),
        ("KB", BYTES_PER_KB),
    ):
        if abs(nbytes) >= size:
            return f"{nbytes / size:,.3g} {unit}"
    return f"{nbytes:,.0f} B"


def _setting(stage: StagePlan, engine: str, key: str, default: Any = None) -> Any:
    return stage.engines.get(engine, {}).get(key, default)


def engine_checks(stage: StagePlan, plan: Plan, pool: float | None) -> list[ReviewCheck]:
    """EL01-EL07 on one stage's engine settings; ``pool`` is its device KV pool in bytes."""
    st, out = stage.stage, []
    ranks = stage.gpus_per_instance or plan.model.tp
    if "dynamo-kvbm" in stage.engines:
        cpu_gb = _setting(stage, "dynamo-kvbm", "DYN_KVBM_CPU_CACHE_GB")
        disk_gb = _setting(stage, "dynamo-kvbm", "DYN_KVBM_DISK_CACHE_GB")
        if cpu_gb is None or pool is None:
            out.append(
                check(
                    "EL01",
                    "kvbm.host_below_device",
                    st,
                    "error",
                    "skip",
                    "needs DYN_KVBM_CPU_CACHE_GB and the device KV pool (gpu_kv_pool)",
                    "kvbm",
                )
            )
        else:
            # KVBM sizes per engine instance (its leader sums the TP workers' blocks), so the
            # device pool it must cover is one engine instance's: the instance's pool over its
            # TP groups.
            tp = int(_setting(stage, "vllm", "tensor-parallel-size") or plan.model.tp)
            groups = max(1, ranks // tp)
            pool_engine = pool / groups
            bad = cpu_gb * BYTES_PER_GB < pool_engine
            out.append(
                check(
                    "EL01",
                    "kvbm.host_below_device",
                    st,
                    "error",
                    "fail" if bad else "pass",
                    f"DYN_KVBM_CPU_CACHE_GB={cpu_gb:g} against the device KV pool of one engine "
                    f"instance, {fmt_bytes(pool_engine)}"
                    + ("" if groups == 1 else f" ({fmt_bytes(pool)} over {groups} TP groups)")
                    + (
                        ": KVBM will churn with no benefit (host cache must be at least the device "
                        "pool)"
                        if bad
                        else ""
                    ),
                    "kvbm",
                    cpu_cache_gb=cpu_gb,
                    device_pool_gb=pool_engine / BYTES_PER_GB,
                )
            )
        if disk_gb is None or cpu_gb is None:
            out.append(
                check(
                    "EL02",
                    "kvbm.disk_below_host",
                    st,
                    "warning",
                    "skip",
                    "no disk tier set (DYN_KVBM_DISK_CACHE_GB)",
                    "kvbm",
                )
            )
        else:
            bad = disk_gb < cpu_gb
            out.append(
                check(
                    "EL02",
                    "kvbm.disk_below_host",
                    st,
                    "warning",
                    "fail" if bad else "pass",
                    f"DYN_KVBM_DISK_CACHE_GB={disk_gb:g} against DYN_KVBM_CPU_CACHE_GB={cpu_gb:g}"
                    + (
                        ": the disk tier holds less than host memory, so it adds no hits"
                        if bad
                        else ""
                    ),
                    "kvbm",
                    disk_cache_gb=disk_gb,
                    cpu_cache_gb=cpu_gb,
                )
            )
    if "sglang-hicache" in stage.engines:
        size_gb = _setting(stage, "sglang-hicache", "hicache-size", 0) or None
        ratio = _setting(stage, "sglang-hicache", "hicache-ratio", 2.0)
        per_rank_pool = pool / ranks if pool else None
        if size_gb is not None:
            ratio = (size_gb * BYTES_PER_GB / per_rank_pool) if per_rank_pool else None
        if ratio is None:
            out.append(
                check(
                    "EL03",
                    "hicache.ratio_below_2",
                    st,
                    "warning",
                    "skip",
                    "hicache-size is set but the device KV pool is unknown",
                    "hicache_ratio",
                )
            )
        else:
            bad = ratio < HICACHE_MIN_RATIO
            out.append(
                check(
                    "EL03",
                    "hicache.ratio_below_2",
                    st,
                    "warning",
                    "fail" if bad else "pass",
                    f"host pool is {ratio:.2f}× the device pool"
                    + (" (below the documented minimum of 2)" if bad else ""),
                    "hicache_ratio",
                    host_to_device_ratio=ratio,
                )
            )
        host_pool_rank = (
            size_gb * BYTES_PER_GB
            if size_gb is not None
            else (ratio * per_rank_pool if per_rank_pool and ratio else None)
        )
        if host_pool_rank is None or stage.host_memory_bytes is None:
            out.append(
                check(
                    "EL04",
                    "hicache.host_pool_exceeds_memory",
                    st,
                    "error",
                    "skip",
                    "needs the host pool size (hicache-size or device pool × ratio) "
                    "and the instance's host memory",
                    "hicache_mem",
                )
            )
        else:
            total = host_pool_rank * ranks
            bad = total > stage.host_memory_bytes
            out.append(
                check(
                    "EL04",
                    "hicache.host_pool_exceeds_memory",
                    st,
                    "error",
                    "fail" if bad else "pass",
                    f"host pools {fmt_bytes(host_pool_rank)} per rank × {ranks} ranks = "
                    f"{fmt_bytes(total)} against {fmt_bytes(stage.host_memory_bytes)}"
                    " of host memory" + (": the server will be OOM-killed" if bad else ""),
                    "hicache_mem",
                    host_pool_bytes_per_rank=host_pool_rank,
                    ranks=ranks,
                    host_memory_bytes=stage.host_memory_bytes,
                )
            )
    if "lmcache" in stage.engines:
        chunk = _setting(stage, "lmcache", "chunk_size", 256)
        if "sglang-hicache" in stage.engines:
            block, by = _setting(stage, "sglang-hicache", "page-size", 1), "SGLang --page-size"
        else:
            block, by = _setting(stage, "vllm", "block-size", 16), "vLLM --block-size"
        bad = chunk % block != 0
        out.append(
            check(
                "EL05",
                "lmcache.chunk_not_multiple",
                st,
                "error",
                "fail" if bad else "pass",
                f"LMCache chunk_size {chunk} is {'not ' if bad else ''}a multiple of the engine's "
                f"block of {block} tokens ({by})",
                "lmcache_chunk",
                chunk_size=chunk,
                engine_block_tokens=block,
            )
        )
        l2 = _setting(stage, "lmcache", "l2-adapter")
        if isinstance(l2, dict) and l2.get("type") == "fs_native":
            bad = "max_capacity_gb" in l2 and not l2.get("eviction")
            out.append(
                check(
                    "EL06",
                    "lmcache.fs_native_no_eviction",
                    st,
                    "error",
                    "fail" if bad else "pass",
                    "fs_native L2 "
                    + (
                        "sets max_capacity_gb without an eviction block: the disk "
                        "grows past the cap"
                        if bad
                        else "has its eviction set"
                    ),
                    "lmcache_fs",
                    max_capacity_gb=l2.get("max_capacity_gb"),
                )
            )
    if "mooncake" in stage.engines:
        master = _setting(stage, "mooncake", "master") or {}
        root = _setting(stage, "mooncake", "root_fs_dir") or master.get("root_fs_dir")
        offload = bool(
            _setting(stage, "mooncake", "enable_offload", False) or master.get("enable_offload")
        )
        bad = bool(root) and offload
        out.append(
            check(
                "EL07",
                "mooncake.root_fs_dir_with_offload",
                st,
                "error",
                "fail" if bad else "pass",
                "root_fs_dir and enable_offload are "
                + (
                    "both set: the documentation says never combine them" if bad else "not combined"
                ),
                "mooncake_fs",
                root_fs_dir=root,
                enable_offload=offload,
            )
        )
    return out
