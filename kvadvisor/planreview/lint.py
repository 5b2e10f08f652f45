"""The engine lint (EL01-EL07): an engine's settings judged against its documentation.

It needs the plan only, as do EL09-EL31 (:mod:`kvadvisor.planreview.enginelint`, one check for
every setting `--emit` writes); the checks that need the trace replayed (RV01-RV08, EL08) are in
:mod:`kvadvisor.planreview.tierchecks`.
"""

from __future__ import annotations

from typing import Any

from kvadvisor.plan.model import Plan, StagePlan
from kvadvisor.planreview.checks import capacity, check, q
from kvadvisor.results.review import ReviewCheck
from kvadvisor.units import BYTES_PER_GB, Unit

HICACHE_MIN_RATIO = 2.0  # SGLang hicache_design.md: host pool at least twice the device pool


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
                    f"instance, {capacity(pool_engine)}"
                    + ("" if groups == 1 else f" ({capacity(pool)} over {groups} TP groups)")
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
                    f"host pool is {q(ratio, Unit.MULTIPLE)} the device pool"
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
                    f"host pools {capacity(host_pool_rank)} per rank × {ranks} ranks = "
                    f"{capacity(total)} against {capacity(stage.host_memory_bytes)}"
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
