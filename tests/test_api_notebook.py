"""The API in a notebook: short reprs, escaped HTML, DataFrames, charts, Python's exceptions."""

from __future__ import annotations

import dataclasses
import errno
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

import kvadvisor
from kvadvisor.api.advisor import Report
from kvadvisor.errors import ConfigError, KvAdvisorError, TraceFormatError
from kvadvisor.report import plots
from kvadvisor.report.charts import render_svg

REPO = Path(__file__).resolve().parents[1]
HEAD = REPO / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
CLOCK = "2025-01-01T00:00:00+00:00"
PLAN = """
name: two-h200
model: {name: qwen3-32b}
stages:
  serving:
    instance: p5e.48xlarge
    count: 1
    replicas_per_instance: 2
"""
# The columns docs/api.md documents for report.requests() (the replay's when replayed).
TRACE_COLUMNS = ["request", "arrival_s", "input_tokens", "output_tokens"]
REPLAY_COLUMNS = [
    "replica",
    "hit_tokens",
    "loaded_tokens",
    "recomputed_tokens",
    "load_s",
    "queue_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "preemptions",
    "prefill_gpu_s",
    "decode_gpu_s",
]


def jsonl_rows() -> list[dict]:
    """The sample's records read with json alone, in arrival order (stable, as the reader)."""
    with gzip.open(HEAD, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return sorted(rows, key=lambda r: r["timestamp"])


@pytest.fixture(scope="module")
def trace() -> kvadvisor.Trace:
    """The 400-request Mooncake sample."""
    return kvadvisor.read_trace(HEAD)


@pytest.fixture(scope="module")
def report(trace) -> Report:
    """The sample analysed for one provider (its deployment replayed)."""
    return kvadvisor.analyze(
        trace, model="qwen3-32b", gpu="h200", providers=("aws",), generated_at=CLOCK
    )


@pytest.fixture(scope="module")
def replay(trace, tmp_path_factory) -> kvadvisor.Replay:
    """The sample replayed through two Qwen3-32B replicas on one H200 instance."""
    plan = tmp_path_factory.mktemp("plan") / "two-h200.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    return kvadvisor.replay(trace, plan, slo="ttft_p90=2s", generated_at=CLOCK)


def test_trace_to_pandas_holds_the_file_s_values(trace) -> None:
    """One row per record, lengths as the file has them; arrivals in seconds from the first."""
    rows = jsonl_rows()
    frame = trace.to_pandas()
    assert len(frame) == len(rows) == 400
    assert frame["input_tokens"].tolist() == [r["input_length"] for r in rows]
    assert frame["output_tokens"].tolist() == [r["output_length"] for r in rows]
    # Mooncake timestamps are milliseconds.
    assert np.allclose(frame["arrival_s"], [r["timestamp"] / 1000 for r in rows])
    assert [list(h) for h in frame["block_hashes"][:3]] == [r["hash_ids"] for r in rows[:3]]
    assert list(trace.to_pandas(["input_tokens"]).columns) == ["input_tokens"]
    with pytest.raises(ValueError, match="no column 'ttft'; it has: arrival_s"):
        trace.to_pandas(["ttft"])


def test_trace_repr_is_one_line(trace) -> None:
    """Where it came from, its size and span: not the table."""
    text = repr(trace)
    assert "\n" not in text and len(text) < 300
    assert "400 requests over 2.35 min, 512 tokens per block" in text


def test_report_repr_is_a_few_lines(report) -> None:
    """The answer, not the model: the headline, the targets, the findings."""
    text = repr(report)
    lines = text.splitlines()
    assert lines[0] == f"<kvadvisor report: {HEAD.name}, 400 requests over 2.35 min>"
    assert 3 <= len(lines) <= 6 and len(text) < 1200
    assert lines[1].strip().startswith("Recommended")
    assert any(line.strip().startswith("targets: TTFT p99") for line in lines)
    assert any(line.strip().startswith("findings: ") for line in lines)
    # The whole report is still there, a call away.
    assert len(report.to_text()) > len(text)


def test_report_html_escapes_what_came_from_the_trace(report) -> None:
    """A trace path holding markup is shown as text, in the title and in the table."""
    evil = "<img src=x onerror=alert(1)>.jsonl"
    bad = Report.of(dataclasses.replace(report, trace=dataclasses.replace(report.trace, path=evil)))
    page = bad._repr_html_()
    assert "<img" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;.jsonl" in page
    assert page.count("<table>") == 1 and report._repr_html_().startswith("<div")


def test_verdict_repr_and_html(report) -> None:
    """report.verdict: the targets and the primary pick; its HTML one row per provider."""
    vs = report.verdict
    assert vs is not None and vs.primary == "aws"
    lines = repr(vs).splitlines()
    assert lines[0].startswith("<kvadvisor verdict: 1 provider, ")
    v = vs.primary_verdict
    assert f"primary: aws, {v.topology}: " in lines[2]
    assert f"${v.usd_per_hour:,.2f}/h" in lines[2]
    assert vs._repr_html_().count("<tr>") == len(vs.verdicts)
    # The same verdicts as the report's own.
    assert vs.verdicts == report.recommendation.verdict.verdicts


def test_report_requests_are_the_trace_s_rows_and_the_replay_s(report) -> None:
    """One row per request, in trace order; the replayed TTFTs give the report's p99."""
    rows = jsonl_rows()
    frame = report.requests()
    # A disaggregated pick adds the decode stage's replica beside the prefill one.
    disaggregated = report.verdict.primary_verdict.topology == "disaggregated"
    replay_columns = REPLAY_COLUMNS[:5] + ["decode_replica"] * disaggregated + REPLAY_COLUMNS[5:]
    assert list(frame.columns) == TRACE_COLUMNS + replay_columns
    assert len(frame) == len(rows)
    assert frame["request"].tolist() == list(range(len(rows)))
    assert frame["input_tokens"].tolist() == [r["input_length"] for r in rows]
    assert frame["output_tokens"].tolist() == [r["output_length"] for r in rows]
    ttft = frame["ttft_s"].to_numpy()
    finished = ttft[np.isfinite(ttft)]
    assert len(finished) == report.replay.requests.completed
    # The SLO's percentile: the least value with 99% at or below it.
    p99 = np.percentile(finished, 99, method="inverted_cdf")
    assert p99 == pytest.approx(report.replay.requests.ttft_s.p99, rel=1e-12)
    assert (frame["ttft_s"] >= frame["queue_s"]).all()


def test_report_requests_without_a_replay_has_the_trace_s_columns(trace) -> None:
    """--no-replay: the trace's columns only, never invented latencies."""
    quick = kvadvisor.analyze(
        trace, model="qwen3-32b", gpu="h200", providers=("aws",), replay=False
    )
    frame = quick.requests()
    assert list(frame.columns) == TRACE_COLUMNS and len(frame) == trace.requests


def test_a_report_read_back_has_no_rows(report) -> None:
    """The rows are not in the JSON: asking for them says so, as a ValueError."""
    back = Report.from_dict(report.to_dict())
    assert back == report and "request_rows" not in report.to_dict()
    with pytest.raises(ValueError, match="holds no per-request rows"):
        back.requests()


def test_replay_repr_html_and_requests(replay, trace) -> None:
    """replay.requests() is requests_table() as a DataFrame; repr a few lines."""
    frame = replay.requests()
    assert len(frame) == trace.requests
    assert frame.equals(replay.requests_table().to_pandas())
    r = replay.replay.requests
    text = repr(replay)
    assert text.startswith(f"<kvadvisor replay of {HEAD.name} through two-h200 (aggregated)>")
    assert f"{r.completed} of {r.count} requests finished" in text
    assert len(text.splitlines()) <= 5
    met = "met" if replay.replay.slo.met["ttft_p90_s"] else "missed"
    assert f"SLO: TTFT p90 {met}" in text
    assert "<table>" in replay._repr_html_()


@pytest.mark.parametrize("name", Report.PLOT_NAMES)
def test_every_plot_is_a_figure_titled_by_its_question(report, name) -> None:
    """A Figure with one drawn axes whose title asks what the chart answers."""
    fig = report.plot(name)
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    assert ax.get_title(loc="left").endswith("?")
    assert ax.has_data()


@pytest.fixture(scope="module")
def page(report) -> str:
    """The report's HTML page, built once."""
    return report.to_html()


@pytest.mark.parametrize("name", Report.PLOT_NAMES)
def test_every_plot_is_the_chart_the_html_page_shows(report, page, name) -> None:
    """One builder per chart: the plot's spec, drawn as SVG, stands in the page to the byte."""
    spec = plots.PLOTS[name](report)
    assert render_svg(spec) in page
    # and the SVG tells one chart from another: a changed title is not on the page
    assert render_svg(dataclasses.replace(spec, title=spec.title + " (x)")) not in page


def test_the_candidates_plot_marks_the_target_and_labels_the_pick(report) -> None:
    """The HTML's answer chart: the target's percentile, its line, the pick named and priced."""
    vs = report.verdict
    fig = report.plot("candidates")
    ax = fig.axes[0]
    assert ax.get_xlabel().startswith("TTFT p99 (s")
    target = vs.slo.targets["ttft_p99_s"]
    assert any(list(line.get_xdata()) == [target, target] for line in ax.get_lines())
    (label,) = [" ".join(t.get_text().split()) for t in ax.texts]  # unwrapped
    v = vs.primary_verdict
    (chosen,) = {c.label for c in v.candidates if c.lost is None}
    assert label == f"chosen: {chosen}, ${v.usd_per_hour:.2f}/h"


def test_the_ttft_plot_marks_every_ttft_target(report) -> None:
    """Where the replayed distribution crosses a target line is the share that meets it.

    The recommended deployment's replay carries no SLO of its own: the verdict's is marked.
    """
    assert not report.replay.slo.targets
    targets = [v for k, v in report.verdict.slo.targets.items() if k.startswith("ttft_")]
    assert targets
    ax = report.plot("ttft").axes[0]
    assert ax.get_xlabel() == "TTFT (s, log scale)"
    drawn = [list(line.get_xdata()) for line in ax.get_lines()]
    assert all([v, v] in drawn for v in targets)


def test_an_unknown_plot_name_is_a_value_error_with_the_closest(report) -> None:
    """A typo gets the name it was meant to be."""
    with pytest.raises(
        ValueError, match="no chart named 'cache-curve'; did you mean 'cache_curve'"
    ):
        report.plot("cache-curve")


def test_a_plot_the_report_cannot_draw_says_why(trace) -> None:
    """No block hashes, no cache curve: a ValueError that says what is missing."""
    bare = dataclasses.replace(trace, table=trace.table.drop_columns(["block_hashes"]))
    plain = kvadvisor.analyze(bare, model="qwen3-32b", gpu="h200", providers=("aws",), replay=False)
    with pytest.raises(ValueError, match="no 'cache_curve' chart: prefix reuse was not measured"):
        plain.plot("cache_curve")


def test_a_missing_trace_is_a_file_not_found_error(tmp_path: Path) -> None:
    """From every entry that reads a path; still a TraceFormatError (and one CLI line)."""
    for call in (
        lambda: kvadvisor.read_trace(tmp_path / "nope.jsonl"),
        lambda: kvadvisor.analyze(tmp_path / "nope.parquet"),
        lambda: kvadvisor.analyze(tmp_path / "nope.csv"),
        lambda: kvadvisor.describe(tmp_path / "nope.csv"),
    ):
        with pytest.raises(FileNotFoundError) as caught:
            call()
        assert isinstance(caught.value, TraceFormatError)
        assert caught.value.errno == errno.ENOENT
        assert caught.value.filename.endswith("nope" + Path(caught.value.filename).suffix)
        assert "no such file" in str(caught.value)


def test_bad_values_are_value_errors(trace) -> None:
    """An unknown model, a bad --slo: ValueErrors and KvAdvisorErrors.

    An unknown setting is Python's TypeError, as for any function (test_api_advisor.py).
    """
    for call, needle in (
        (lambda: kvadvisor.analyze(trace, model="no-such-model"), "unknown model"),
        (lambda: kvadvisor.analyze(trace, slo="ttft_p99=fast"), "ttft_p99"),
    ):
        with pytest.raises(ValueError, match=needle) as caught:
            call()
        assert isinstance(caught.value, KvAdvisorError)
    assert issubclass(ConfigError, ValueError) and not issubclass(TraceFormatError, ValueError)
