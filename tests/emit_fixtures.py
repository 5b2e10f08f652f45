"""Advice reports for the engine-configuration tests, built in code (no trace needed).

One 8-GPU instance per stage with 2,048 GiB of host memory, a host tier of 1,600 GiB and a
second tier chosen per test; the model is Llama-3.1-70B's KV geometry with FP8-sized weights so
every TP from 1 to 8 fits an H200.
"""

from __future__ import annotations

from kvadvisor.results import (
    AdviceReport,
    HitRatio,
    IoDemand,
    IoRate,
    MemorySummary,
    Meta,
    ModelDeployment,
    ModelSummary,
    MrcPoint,
    PrefixCache,
    Recommendation,
    StageRecommendation,
    Tier,
    TraceSummary,
)
from kvadvisor.vocab import TierRole

GIB = 1024**3
GB = 1000**3
KVB = 327_680  # Llama-3.1-70B, bf16 (research/field.md §4.1)
WEIGHTS = 70 * GB  # the whole model's weights (FP8), so TP 1 fits one 141 GiB GPU
HOST_GIB = 2048.0
HOST_TIER_GIB = 1600.0
GPU_GIB = 141.0
MRC = (
    MrcPoint(16_384, 0.10, 0.10),
    MrcPoint(65_536, 0.30, 0.35),
    MrcPoint(262_144, 0.40, 0.42),
    MrcPoint(1_048_576, 0.45, 0.47),
    MrcPoint(None, 0.46, 0.48),
)
HOST = Tier("host-dram-ddr5-spr", "memory", TierRole.HOST_POOL, HOST_TIER_GIB)
NVME = Tier("nvme-gen5-x4", "local_nvme", TierRole.CAPACITY, 8000.0, devices=4)
FSX = Tier(
    "aws-fsx-lustre-persistent2-125", "parallel_fs", TierRole.CAPACITY, 100_000.0, shared=True
)
POOL = Tier("mooncake-store", "kv_store", TierRole.CAPACITY, 5000.0, shared=True)


def stage_recommendation(tiers: tuple[Tier, ...], count: int = 1) -> StageRecommendation:
    """``count`` p5e.48xlarge (8 x H200 of 141 GiB, 2,048 GiB host) with ``tiers``."""
    return StageRecommendation(
        "p5e.48xlarge",
        tiers[-1].name,
        instance_count=count,
        gpu="h200",
        tiers=tiers,
        chunk_tokens=256,
        gpus_per_instance=8,
        gpu_memory_gib=GPU_GIB,
        host_memory_gib=HOST_GIB,
    )


def emit_report(
    tp: int = 2,
    prefill: tuple[Tier, ...] = (HOST, NVME),
    decode: tuple[Tier, ...] | None = (HOST,),
    hashes: bool = True,
) -> AdviceReport:
    """A report recommending ``prefill`` and ``decode`` stages (decode None: aggregated)."""
    mem = GPU_GIB * GIB
    memory = MemorySummary(
        mem, 0.9 * mem, WEIGHTS / tp, 0.9 * mem - WEIGHTS / tp, True, 0, 0, 0, 0, True
    )
    model = ModelSummary(
        "llama-3.1-70b",
        KVB,
        kv_bytes_per_token_per_gpu=KVB // tp,
        deployment=ModelDeployment("h200", "H200", False, tp, False, "bf16", "bf16"),
        memory=memory,
    )
    cache = (
        PrefixCache(0.5, HitRatio(0.46, 0.48), MRC)
        if hashes
        else PrefixCache(0.5, HitRatio(None, None), ())
    )
    return AdviceReport(
        meta=Meta(1, "0.1.0", "2026-01-01T00:00:00+00:00"),
        trace=TraceSummary(
            "trace.parquet",
            "mooncake",
            100,
            10.0,
            512,
            input_tokens_total=1_000_000,
            sha256="ab" * 32,
        ),
        model=model,
        prefix_cache=cache,
        io=IoDemand(IoRate(1e9, 5e9, 10e9), IoRate(1e9, 2e9, 3e9), 1.0),
        recommendation=Recommendation(
            stage_recommendation(prefill),
            stage_recommendation(decode) if decode is not None else StageRecommendation(None, None),
        ),
    )
