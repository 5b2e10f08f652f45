"""Facts: the registry's names and units, and facts computed from report sections by hand."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kvadvisor.facts.doc import render_facts_doc
from kvadvisor.facts.registry import FACT_SPECS, FACTS
from kvadvisor.facts.workload import hit_ratio_at, report_facts, working_set_tokens, workload_facts
from kvadvisor.results.common import IoRate, TraceSummary
from kvadvisor.results.report import (
    HitRatio,
    IoDemand,
    ModelSummary,
    MrcPoint,
    PrefixCache,
    StageSplit,
)
from kvadvisor.rules.model import UNIT_MEANINGS

REPO = Path(__file__).resolve().parents[1]
TRACE = TraceSummary(
    path="t",
    format="mooncake",
    requests=10_000,
    duration_s=1000.0,
    block_tokens=512,
    columns=("arrival_s", "input_tokens", "output_tokens", "block_hashes"),
    input_tokens_total=20_000_000,
    output_tokens_total=300_000,
    arrival_rate_per_s=10.0,
)
MODEL = ModelSummary("llama-3.1-70b", 327_680)
CACHE = PrefixCache(
    0.5,
    HitRatio(0.40, 0.50),
    (
        MrcPoint(16384, 0.01, 0.02),
        MrcPoint(1048576, 0.20, 0.30),
        MrcPoint(4194304, 0.35, 0.46),
        MrcPoint(16777216, 0.40, 0.50),
        MrcPoint(None, 0.40, 0.50),
    ),
)
IO = IoDemand(IoRate(1.0e9, 3.0e9, 6.0e9), IoRate(0.5e9, 1.0e9, 2.0e9), 1.0)


def test_registry_units_and_names() -> None:
    """Every fact has a known unit, a description, and a name whose suffix matches its unit."""
    assert len(FACTS) == len(FACT_SPECS)
    suffix_unit = {
        "_s": "s",
        "_gib": "gib",
        "_bytes": "bytes",
        "_tokens": "tokens",
        "_us": "us",
        "_tflops": "tflops",
        "_gbps": "gbps",
    }
    for spec in FACT_SPECS:
        assert spec.unit in UNIT_MEANINGS and spec.description and spec.source, spec.name
        for suffix, unit in suffix_unit.items():
            if spec.name.endswith(suffix) and not spec.name.endswith("_per_s"):
                assert spec.unit == unit, spec.name
        if spec.name.endswith("bytes_per_s") or "bytes_per_s_" in spec.name:
            assert spec.unit == "bytes_per_s", spec.name


def test_workload_facts_by_hand() -> None:
    """Means, ratios and I/O sizes follow their formulas."""
    f = workload_facts(TRACE, MODEL, StageSplit("modeled", 900.0, 100.0, 0.9), CACHE, IO)
    value = {k: v.value for k, v in f.items()}
    assert value["input_tokens_mean"] == 2000
    assert value["output_to_input_tokens_ratio"] == pytest.approx(0.015)
    assert value["prefill_share_gpu_time"] == pytest.approx(0.9)
    assert value["prefill_to_decode_gpu_time_ratio"] == pytest.approx(9.0)
    assert value["busy_gpus_mean"] == pytest.approx(1.0)
    assert value["write_peak_to_mean"] == 6.0 and value["write_p99_to_mean"] == 3.0
    assert value["io_size_bytes"] == 256 * 327_680
    assert value["write_iops_p99"] == pytest.approx(3.0e9 / (256 * 327_680))
    # Working set: 90% of the unbounded steady 0.50 is 0.45, first reached at 4,194,304 tokens.
    assert value["kv_working_set_tokens"] == 4_194_304
    assert value["kv_working_set_gib"] == pytest.approx(4_194_304 * 327_680 / 2**30)
    assert value["prefix_reuse_measurable"] is True


def test_absent_sections_give_absent_facts() -> None:
    """A fact the analysis could not produce is absent, never zero."""
    f = workload_facts(TRACE)
    for name in (
        "prefill_share_gpu_time",
        "prefix_hit_ratio_unbounded",
        "write_bytes_per_s_p99",
        "kv_bytes_per_token",
        "io_size_bytes",
    ):
        assert name not in f
    assert f["requests_count"].value == 10_000


def test_hit_ratio_at_is_a_lower_bound() -> None:
    """Between curve points the ratio of the point below is used; below the first, zero."""
    assert hit_ratio_at(CACHE, 2_000_000) == 0.30
    assert hit_ratio_at(CACHE, 4_194_304) == 0.46
    assert hit_ratio_at(CACHE, 1000) == 0.0
    unknown = PrefixCache(0.5, HitRatio(None, None), (MrcPoint(16384, None, None),))
    assert hit_ratio_at(unknown, 1e9) is None
    assert working_set_tokens(unknown) is None


def test_report_facts_from_richer_sections() -> None:
    """Reuse quantiles, TTL at 90% and the profiler's memory fit become facts."""
    cache = SimpleNamespace(
        **{k: getattr(CACHE, k) for k in ("warmup_fraction", "hit_ratio", "mrc")},
        status="exact",
        curve=(),
        reuse=SimpleNamespace(
            quantiles=(
                SimpleNamespace(quantile=0.5, seconds=114.0),
                SimpleNamespace(quantile=0.9, seconds=519.0),
            ),
            ttl=(
                SimpleNamespace(share=0.5, ttl_s=114.0, capacity_tokens=1000),
                SimpleNamespace(share=0.9, ttl_s=519.0, capacity_tokens=3_276_800),
            ),
        ),
    )
    model = SimpleNamespace(
        kv_bytes_per_token=327_680,
        deployment=SimpleNamespace(tp=8, gpu="h200"),
        memory=SimpleNamespace(
            weight_bytes_per_gpu=17.5 * 2**30,
            kv_working_set_peak_bytes_per_gpu=40 * 2**30,
            max_concurrent_requests=96.0,
        ),
    )
    report = SimpleNamespace(
        trace=TRACE, model=model, stage_split=None, prefix_cache=cache, io=None
    )
    f = {k: v.value for k, v in report_facts(report).items()}
    assert f["reuse_time_p50_s"] == 114.0 and f["reuse_time_p90_s"] == 519.0
    assert f["retention_ttl_s"] == 519.0
    assert f["retention_capacity_gib"] == pytest.approx(3_276_800 * 327_680 / 2**30)
    assert f["model_weights_gib"] == pytest.approx(140.0)
    assert f["max_concurrent_requests_fit"] == 96.0


def test_reuse_unknown_from_the_cache_section() -> None:
    """A cache section with status unknown makes prefix reuse unmeasurable."""
    cache = PrefixCache(0.5, HitRatio(None, None), (MrcPoint(None, None, None),))
    report = SimpleNamespace(trace=TRACE, model=None, stage_split=None, prefix_cache=cache, io=None)
    assert report_facts(report)["prefix_reuse_measurable"].value is False


def test_facts_doc_is_up_to_date() -> None:
    """docs/facts.md is generated from the registry (`kvadvisor rules facts -o docs/facts.md`)."""
    assert (REPO / "docs" / "facts.md").read_text(encoding="utf-8") == render_facts_doc()


def test_stage_split_gpu_seconds_become_replica_seconds() -> None:
    """stage_split is in GPU-seconds (docs/stage-profiler.md); the facts in replica-seconds.

    At TP 4, 800 + 200 GPU-seconds over the 1000-s trace keep 1.0 GPU busy on average, and
    one replica spends 800 / 4 = 200 s in prefill (docs/facts.md).
    """
    model = SimpleNamespace(
        kv_bytes_per_token=327_680, deployment=SimpleNamespace(tp=4), memory=None
    )
    report = SimpleNamespace(
        trace=TRACE,
        model=model,
        prefix_cache=None,
        io=None,
        stage_split=StageSplit("modeled", 800.0, 200.0, 0.8),
    )
    f = {k: v.value for k, v in report_facts(report).items()}
    assert f["busy_gpus_mean"] == pytest.approx(1.0)
    # GPU-seconds, as the stage split reports them (not divided by the replica's 4 GPUs).
    assert f["prefill_gpu_s"] == pytest.approx(800.0) and f["decode_gpu_s"] == pytest.approx(200.0)
    assert f["split_gpus_per_replica"] == 4
    assert f["prefill_share_gpu_time"] == pytest.approx(0.8)
