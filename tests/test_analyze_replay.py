"""`analyze` replays the deployment it recommends: the closed-loop split becomes the report's."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import kvadvisor
from kvadvisor.report.jsonreport import schema
from kvadvisor.report.replayjson import replay_schema

SAMPLE = (
    Path(__file__).resolve().parents[1] / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
)


@pytest.fixture(scope="module")
def report() -> kvadvisor.Report:
    """The Mooncake sample analysed for Qwen3-32B on H200 (fixed clock)."""
    return kvadvisor.analyze(
        SAMPLE, model="qwen3-32b", gpu="h200", generated_at="2026-01-01T00:00:00+00:00"
    )


def test_the_recommended_deployment_is_replayed_and_its_split_is_the_reports(
    report: kvadvisor.Report,
) -> None:
    """stage_split is the replay's GPU time; the open-loop figures stay as the bound."""
    assert report.replay is not None
    split, closed = report.stage_split, report.replay.stage_split
    assert split is not None and split.source == "replay"
    assert split.prefill_s == pytest.approx(closed.prefill_gpu_s)
    assert split.decode_s == pytest.approx(closed.decode_gpu_s)
    assert split.open_loop_prefill_share is not None
    assert split.open_loop_prefill_share != pytest.approx(split.prefill_share)
    # the replayed fleet is the recommended one (the primary verdict's), stage by stage
    rec = report.recommendation
    assert rec is not None and rec.verdict is not None
    verdict = rec.verdict.primary_verdict
    assert verdict is not None and verdict.chosen
    stages = {s.role.value: s for s in report.replay.stages}
    assert set(stages) == {s.role for s in verdict.stages}
    for stage in verdict.stages:
        assert stages[stage.role].instance == stage.instance
        assert stages[stage.role].instances == stage.instances
    # the rules saw the figures the report shows
    facts = rec.facts
    assert facts["prefill_share_gpu_time"]["value"] == pytest.approx(split.prefill_share)


def test_the_contract_carries_the_replay(report: kvadvisor.Report) -> None:
    """format_version 2: the JSON validates, and its replay section has the replay's shape."""
    doc = json.loads(report.to_json())
    assert doc["format_version"] == 2
    jsonschema.validate(doc, schema())
    section_schema = {**replay_schema(), "$ref": "#/$defs/replay", "required": []}
    section_schema.pop("properties")
    jsonschema.validate(doc["replay"], section_schema)
    assert kvadvisor.Report.from_dict(report.to_dict()) == report
    assert 'id="replay"' in report.to_html()


def test_no_replay_keeps_the_open_loop_split_and_says_why() -> None:
    """--no-replay (replay=False): the modeled split, and the reason in unavailable."""
    r = kvadvisor.analyze(SAMPLE, model="qwen3-32b", gpu="h200", replay=False)
    assert r.replay is None
    assert r.stage_split is not None and r.stage_split.source == "modeled"
    assert "--no-replay" in r.unavailable["replay"]
    assert "Not replayed" in r.to_html()


def test_no_search_leaves_the_verdicts_and_the_replay_out_and_the_rest_as_always(
    report: kvadvisor.Report,
) -> None:
    """--no-search (search=False): every provider abstains, naming it; nothing replayed.

    The measurements are the default run's: the same cache section, trace summary and model.
    """
    r = kvadvisor.analyze(
        SAMPLE,
        model="qwen3-32b",
        gpu="h200",
        search=False,
        generated_at="2026-01-01T00:00:00+00:00",
    )
    assert r.recommendation is not None and r.recommendation.verdict is not None
    verdicts = r.recommendation.verdict
    assert verdicts.primary is None and verdicts.replayed == 0 and verdicts.enumerated == 0
    assert report.recommendation is not None and report.recommendation.verdict is not None
    assert {v.provider for v in verdicts.verdicts} == {
        v.provider for v in report.recommendation.verdict.verdicts
    }
    assert all(v.status == "abstained" and "--no-search" in v.reason for v in verdicts.verdicts)
    assert r.replay is None and "--no-search" in r.unavailable["replay"]
    assert r.stage_split is not None and r.stage_split.source == "modeled"
    assert r.options["search"] is False and report.options["search"] is True
    assert (r.prefix_cache, r.trace, r.model) == (report.prefix_cache, report.trace, report.model)
