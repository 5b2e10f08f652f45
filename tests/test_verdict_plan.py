"""A verdict carries the typed Plan its search replayed; the JSON report keeps the written plan.

On the Azure code sample's analysis (one aggregated and one disaggregated verdict): each chosen
verdict's ``replayed_plan`` writes (the one plan writer) to exactly its ``plan``; the JSON
report leaves the typed plan out and reads back equal; a pickled report keeps it. Emit and the
recommended replay use the typed plan, and a report read back from JSON (no typed plan: its
mapping checked by the plan loader) gives the same plan files and the same plan.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from advice_traces import slo_for

from kvadvisor.emit import TARGETS, emit_targets
from kvadvisor.fleet.fromreport import PLAN_PATH, recommended_plan
from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.plan.model import Plan
from kvadvisor.plan.writer import plan_mapping
from kvadvisor.results.report import AdviceReport
from kvadvisor.trace import read_trace

TRACE = Path(__file__).resolve().parents[1] / "sample_traces" / "azure_code_head.csv.zst"
ENGINES = [t for t in TARGETS if t != "plan"]


@pytest.fixture(scope="module")
def report() -> AdviceReport:
    """The sample's analysis, in memory (its verdicts hold their Plans)."""
    return analyze(
        read_trace(TRACE),
        AnalyzeOptions(slo=slo_for(TRACE)),
        version="test",
        generated_at="2026-01-01T00:00:00",
    )


def _primary(report: AdviceReport, topology: str) -> AdviceReport:
    """The report with its cheapest chosen verdict of ``topology`` as the primary."""
    rec = report.recommendation
    assert rec is not None and rec.verdict is not None
    vs = rec.verdict
    pick = next(v for v in vs.verdicts if v.chosen and v.topology == topology)
    return replace(report, recommendation=replace(rec, verdict=replace(vs, primary=pick.provider)))


def _json(report: AdviceReport) -> AdviceReport:
    return AdviceReport.from_dict(json.loads(json.dumps(report.to_dict())))


def test_the_typed_plan_writes_to_the_verdicts_plan(report: AdviceReport) -> None:
    """Every chosen verdict holds a Plan, and its plan mapping is that Plan written."""
    assert report.recommendation is not None and report.recommendation.verdict is not None
    chosen = [v for v in report.recommendation.verdict.verdicts if v.chosen]
    assert {v.topology.value for v in chosen if v.topology} == {"aggregated", "disaggregated"}
    for v in chosen:
        assert isinstance(v.replayed_plan, Plan)
        assert plan_mapping(v.replayed_plan) == v.plan
        assert v.replayed_plan.stage(v.stages[0].role).count == v.stages[0].instances


def test_the_json_report_keeps_the_mapping_and_reads_back_equal(report: AdviceReport) -> None:
    """No typed plan in the JSON; read back it is None, and the report is equal."""
    doc: dict[str, Any] = report.to_dict()
    verdicts = doc["recommendation"]["verdict"]["verdicts"]
    assert all("replayed_plan" not in v and "plan" in v for v in verdicts)
    back = AdviceReport.from_dict(doc)  # (through JSON text, options' tuples become lists)
    assert back == report
    assert back.recommendation is not None and back.recommendation.verdict is not None
    assert all(v.replayed_plan is None for v in back.recommendation.verdict.verdicts)


def test_a_pickled_report_keeps_the_typed_plan(report: AdviceReport) -> None:
    """A report crosses processes (the plan's catalogs pickle) with its verdicts' plans."""
    again = pickle.loads(pickle.dumps(report))
    assert again.recommendation is not None and again.recommendation.verdict is not None
    for v in again.recommendation.verdict.verdicts:
        if v.chosen:
            assert plan_mapping(v.replayed_plan) == v.plan


@pytest.mark.parametrize("topology", ["aggregated", "disaggregated"])
def test_emit_from_the_plan_equals_emit_from_the_json(report: AdviceReport, topology) -> None:
    """Each engine's plan file from the typed plan is the one from the plan read back."""
    mine = _primary(report, topology)
    back = _json(mine)
    typed, refused = emit_targets(mine, [*ENGINES, "plan"], "kvadvisor analyze t")
    read, refused_back = emit_targets(back, [*ENGINES, "plan"], "kvadvisor analyze t")
    # An engine whose page the verdict was not replayed at refuses it (both ways alike).
    assert refused == refused_back and len(refused) < len(ENGINES)
    plans = [n for n in typed if n.startswith("plan-")]
    assert len(plans) == len(ENGINES) - len(refused) > 1
    for name in plans:
        assert typed[name] == read[name], name
        assert "engine_files:" in typed[name], name
    assert typed == read


@pytest.mark.parametrize("topology", ["aggregated", "disaggregated"])
def test_the_recommended_replay_runs_the_verdicts_plan(report: AdviceReport, topology) -> None:
    """fleet.fromreport takes the verdict's Plan as is; from JSON, the loader's reads alike."""
    mine = _primary(report, topology)
    rec = mine.recommendation
    assert rec is not None and rec.verdict is not None and rec.verdict.primary_verdict
    typed, why = recommended_plan(mine)
    assert why == "" and typed == replace(rec.verdict.primary_verdict.replayed_plan, path=PLAN_PATH)
    read, _ = recommended_plan(_json(mine))
    assert typed is not None and read is not None
    assert plan_mapping(typed) == plan_mapping(read)
