"""Reports for the renderer tests, built in code.

A small trace analysed for real, and a full report whose later sections (stage split, cache,
I/O, advice) are filled with fixed values, so every renderer path is exercised before, and
independently of, the engines that compute them.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from kvadvisor.advise import analyze
from kvadvisor.advise.analysis import AnalyzeOptions
from kvadvisor.advise.model import (
    AdviceReport,
    Finding,
    HitRatio,
    IoDemand,
    IoRate,
    ModelSummary,
    MrcPoint,
    PrefixCache,
    Recommendation,
    StageRecommendation,
    StageSplit,
)
from kvadvisor.trace.model import Trace

VERSION = "0.1.0"
GENERATED_AT = "2026-01-01T00:00:00+00:00"
SHA256 = "0" * 63 + "1"


def small_trace(
    n: int = 40, request_prefix: str = "req-", model: str = "qwen3-32b", path: str = "small.jsonl"
) -> Trace:
    """``n`` requests 0.75 s apart; every third shares a 2-block prefix (512-token blocks)."""
    arrival = [i * 0.75 for i in range(n)]
    inputs = [600 + 97 * (i % 7) * 11 for i in range(n)]
    outputs = [20 + 13 * (i % 5) ** 2 for i in range(n)]
    hashes = []
    for i, tokens in enumerate(inputs):
        blocks = -(-tokens // 512)
        shared = [1, 2] if i % 3 == 0 else [1000 + i * 10]
        hashes.append((shared + [100_000 + i * 10 + k for k in range(blocks)])[:blocks])
    table = pa.table(
        {
            "arrival_s": pa.array(arrival, pa.float64()),
            "input_tokens": pa.array(inputs, pa.int64()),
            "output_tokens": pa.array(outputs, pa.int64()),
            "request_id": pa.array([f"{request_prefix}{i}" for i in range(n)], pa.string()),
            "model": pa.array([model] * n, pa.string()),
            "block_hashes": pa.array(hashes, pa.list_(pa.int64())),
        }
    )
    return Trace(table=table, block_tokens=512, source_format="mooncake", source_path=path)


def analysed(trace: Trace) -> AdviceReport:
    """The real pipeline on ``trace`` with the fixed clock, version and hash."""
    return analyze(
        trace,
        AnalyzeOptions(),
        version=VERSION,
        generated_at=GENERATED_AT,
        trace_sha256=SHA256,
    )


def fill_sections(report: AdviceReport, text: str = "") -> AdviceReport:
    """Fill every later section with fixed values; ``text`` is appended to every free string."""
    return replace(
        report,
        model=ModelSummary(name=f"qwen3-32b{text}", kv_bytes_per_token=262_144),
        stage_split=StageSplit(
            source="modeled", prefill_s=612.5, decode_s=187.5, prefill_share=0.765625
        ),
        prefix_cache=PrefixCache(
            warmup_fraction=0.5,
            hit_ratio=HitRatio(all=0.42, steady=0.5),
            mrc=(
                MrcPoint(16_384, 0.05, 0.06),
                MrcPoint(65_536, 0.12, 0.15),
                MrcPoint(262_144, 0.25, 0.3),
                MrcPoint(1_048_576, 0.36, 0.43),
                MrcPoint(4_194_304, 0.41, 0.49),
                MrcPoint(16_777_216, 0.42, 0.5),
                MrcPoint(None, 0.42, 0.5),
            ),
        ),
        io=IoDemand(
            write=IoRate(1.25e9, 4.5e9, 6.0e9),
            read=IoRate(0.8e9, 2.1e9, 2.4e9),
            window_s=1.0,
        ),
        recommendation=Recommendation(
            prefill=StageRecommendation(instance=f"p5e.48xlarge{text}", storage="local NVMe Gen5"),
            decode=StageRecommendation(instance="gn8is", storage=f"host DRAM{text}"),
        ),
        findings=(
            Finding(
                code="ST01",
                severity="warning",
                stage="prefill",
                message=f"Prefill writes peak at 4.8x their mean{text}",
                evidence={"write_peak_bytes_per_s": 6.0e9, "write_mean_bytes_per_s": 1.25e9},
            ),
            Finding(
                code="CA01",
                severity="info",
                stage="decode",
                message="42% of prompt tokens are reusable",
                evidence={"prefix_hit_ratio": 0.42, "note": f"steady state{text}"},
            ),
        ),
        versions={"catalog": f"2026.01{text}", "rules": "1"},
    )


def full_report() -> AdviceReport:
    """The small trace analysed, with every section filled."""
    return fill_sections(analysed(small_trace()))
