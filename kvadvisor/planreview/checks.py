"""The review's checks: how one is built and the sources they cite."""

from __future__ import annotations

from typing import Any

from kvadvisor.results.review import ReviewCheck
from kvadvisor.results.vocab import CheckStatus, Severity, Stage
from kvadvisor.units import Unit, format_value

SOURCES = {
    # `kvadvisor docs TOPIC#SECTION` prints the cited section, in a pip install too.
    "design": "definitions of prefix hit, write and read demand: `kvadvisor docs "
    "cache#prefix-hit`, `kvadvisor docs stage-profiler#io-demand`",
    "cause1": "underutilization cause 1, sized for the peak, run at the average: `kvadvisor "
    "docs advisor#one-storage-spec`",
    "cause2": "underutilization cause 2, the stage time split ignored: `kvadvisor docs "
    "advisor#one-storage-spec`",
    "loadrecompute": "load vs recompute: `kvadvisor docs stage-profiler#load-vs-recompute`; "
    "Mooncake FAST'25 break-even; dynamo #6101",
    "kvbm": "ai-dynamo/dynamo kvbm-guide.md (PR #6506): CPU cache >= device pool, DISK >= CPU; "
    "both per engine instance (lib/llm/src/block_manager/distributed/leader.rs@ae2223b)",
    "hicache_ratio": "sgl-project/sglang hicache_design.md: --hicache-ratio minimum 2",
    "hicache_mem": "sglang #5372, bytedance-iaas/sglang #744: host pools over host memory OOM",
    "lmcache_chunk": "LMCache configurations.rst chunk_size; LMCache #4782, #5217 (KV geometry)",
    "lmcache_fs": "LMCache #4725: fs_native max_capacity_gb without eviction grows past the cap",
    "mooncake_fs": "Mooncake deployment guide: do not combine --root_fs_dir with --enable_offload",
    "ssd_bound": "LMCache #4725, Mooncake #924: a disk tier without a bound fills the disk",
    "slo": "the plan's SLO; load time: the plan's closed-loop replay (loads sharing each "
    "tier's bandwidth, docs/replay.md), else latency + bytes / read bandwidth per tier",
    "replay": "the plan's SLO against its closed-loop replay (docs/replay.md)",
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
    "deploy": "the catalogs' deployment rules (docs/catalog.md): a cloud instance's own NVMe, "
    "its provider's volumes (count and disk caps) and file systems; bought drives on-premises",
}


def check(
    code: str,
    name: str,
    stage: Stage | str,
    severity: Severity | str,
    status: CheckStatus | str,
    message: str,
    source: str,
    subject: str = "",
    **evidence: Any,
) -> ReviewCheck:
    """A ReviewCheck citing ``SOURCES[source]``; keyword arguments are its evidence.

    Stage, severity and status may be given by their spellings ("prefill", "error", "fail");
    a misspelt one is a ValueError here rather than a check no renderer knows.
    """
    return ReviewCheck(
        code,
        name,
        Stage(stage),
        Severity(severity),
        CheckStatus(status),
        message,
        evidence,
        SOURCES[source],
        subject,
    )


def capacity(nbytes: float | None) -> str:
    """A tier's or pool's size as every report shows sizes; None is unbounded."""
    return "unbounded" if nbytes is None else format_value(nbytes, Unit.BYTES)


def q(value: float | None, unit: Unit) -> str:
    """A number in a check's message, by the one formatter ("unknown" when None)."""
    return "unknown" if value is None else format_value(value, unit)
