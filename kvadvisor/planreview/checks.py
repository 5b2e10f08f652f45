"""The review's checks: how one is built and the sources they cite."""

from __future__ import annotations

from typing import Any

from kvadvisor.results.review import ReviewCheck
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_KB, BYTES_PER_MB, BYTES_PER_TB

SOURCES = {
    "design": "DESIGN.md definitions (prefix hit, write and read demand)",
    "cause1": "DESIGN.md, underutilization cause 1 (sized for the peak, run at the average)",
    "cause2": "DESIGN.md, underutilization cause 2 (the stage time split ignored)",
    "loadrecompute": "DESIGN.md load vs recompute; Mooncake FAST'25 break-even; dynamo #6101",
    "kvbm": "ai-dynamo/dynamo kvbm-guide.md (PR #6506): CPU cache >= device pool, DISK >= CPU",
    "hicache_ratio": "sgl-project/sglang hicache_design.md: --hicache-ratio minimum 2",
    "hicache_mem": "sglang #5372, bytedance-iaas/sglang #744: host pools over host memory OOM",
    "lmcache_chunk": "LMCache configurations.rst chunk_size; LMCache #4782, #5217 (KV geometry)",
    "lmcache_fs": "LMCache #4725: fs_native max_capacity_gb without eviction grows past the cap",
    "mooncake_fs": "Mooncake deployment guide: do not combine --root_fs_dir with --enable_offload",
    "ssd_bound": "LMCache #4725, Mooncake #924: a disk tier without a bound fills the disk",
    "slo": "the plan's SLO; load time = latency + bytes / read bandwidth per tier",
    "deploy": "the catalogs' deployment rules (docs/catalog.md): a cloud instance's own NVMe, "
    "its provider's volumes (count and disk caps) and file systems; bought drives on-premises",
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
