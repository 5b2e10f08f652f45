"""`verify --results BASELINE --results CANDIDATE --gate`: the A/B gate over two result folders.

Two folders are generated from one trace: the two-node plan without its NVMe tier (baseline)
and with it (candidate). Each gets a vLLM ``--save-detailed`` result file for its own dataset,
with toy timings (TTFT 50 ms + 0.1 ms per prompt token the engine computes, 20 ms per output
token): the baseline computes every prompt token, the candidate only those no earlier request
of its dataset shared (the prefix ids). The expected figures are computed here from the files
written, independently of kvadvisor's reading.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner
from verify_fixtures import SERVING_PLAN, write_bursty_trace

from kvadvisor.cli import EXIT_FINDINGS, EXIT_OK, app

runner = CliRunner()
CANDIDATE = SERVING_PLAN.replace("    count: 1\n", "    count: 2\n    router: prefix_aware\n")
BASELINE = CANDIDATE.replace("name: llama8b-serving", "name: no-tier").split("    tiers:")[0]
MODEL_ID = "meta-llama/Llama-3.1-8B-Instruct"


def _write_result(folder: Path, reuse: bool) -> dict:
    """A vLLM result for the folder's dataset; returns its arrays (seconds)."""
    rows = [json.loads(x) for x in (folder / "bench" / "trace.timed.jsonl").read_text().split()]
    block = json.loads((folder / "verify.json").read_text())["benchmarks"][0]["chunk_hash_size"]
    seen: set[int] = set()
    ttfts = []
    for r in rows:
        cached = 0
        for i in r["hash_ids"]:  # a prefix: hits until the first id not seen
            if not reuse or i not in seen:
                break
            cached += 1
        seen.update(r["hash_ids"])
        computed = max(r["input_length"] - cached * block, 1)
        ttfts.append(0.05 + 1e-4 * computed)
    outputs = [r["output_length"] for r in rows]
    starts = [r["timestamp"] for r in rows]
    doc = {
        "backend": "vllm",
        "model_id": MODEL_ID,
        "input_lens": [r["input_length"] for r in rows],
        "output_lens": outputs,
        "ttfts": ttfts,
        "itls": [[0.02] * (o - 1) for o in outputs],
        "start_times": starts,
        "errors": [""] * len(rows),
    }
    (folder / "results").mkdir(exist_ok=True)
    (folder / "results" / "vllm-bench.json").write_text(json.dumps(doc))
    e2e = np.array(ttfts) + 0.02 * (np.array(outputs) - 1)
    span = (np.array(starts) + e2e).max() - min(starts)
    return {
        "ttft_p50": float(np.percentile(ttfts, 50)),
        "ttft_p99": float(np.percentile(ttfts, 99)),
        "throughput": float(np.sum(outputs) / span),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both folders generated from one trace, each with its benchmark result written."""
    base = tmp_path_factory.mktemp("verify-gate")
    trace = write_bursty_trace(base / "t.jsonl")
    out = {}
    for name, text, reuse in (("baseline", BASELINE, False), ("candidate", CANDIDATE, True)):
        plan = base / f"{name}.yaml"
        plan.write_text(text)
        folder = base / name
        result = runner.invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(folder)])
        assert result.exit_code == EXIT_OK, result.output
        out[name] = folder
        out[f"{name}_figures"] = _write_result(folder, reuse)
    out["trace"] = trace
    return out


def _invoke(runs: dict, *extra: str):
    return runner.invoke(
        app,
        ["verify", "--results", str(runs["baseline"]), "--results", str(runs["candidate"])]
        + list(extra),
    )


def _change(runs: dict, metric: str) -> float:
    return runs["candidate_figures"][metric] / runs["baseline_figures"][metric] - 1.0


def test_gate_met_passes_with_both_runs_figures(runs: dict, tmp_path: Path) -> None:
    """TTFT p50 down over 50%, p99 over 10%, throughput within 5%: exit 0, figures in JSON."""
    # The prefix reuse the candidate's tier serves (the p99 is a session's first turn, which
    # no tier helps, so it drops less); arrivals are the trace's, so throughput holds.
    assert _change(runs, "ttft_p50") < -0.6 and _change(runs, "ttft_p99") < -0.15
    assert abs(_change(runs, "throughput")) < 0.04
    report = tmp_path / "ab.json"
    gate = "ttft_p50=-50%,ttft_p99=-10%,throughput=-5%"
    result = _invoke(runs, "--gate", gate, "-o", str(report))
    assert result.exit_code == EXIT_OK, result.output
    assert "every gate passes (3)" in result.output
    doc = json.loads(report.read_text())
    verdicts = {v["metric"]: v for v in doc["gate"]["verdicts"]}
    for metric in ("ttft_p50", "ttft_p99", "throughput"):
        v = verdicts[metric]
        assert v["passed"] is True
        assert v["baseline"] == pytest.approx(runs["baseline_figures"][metric])
        assert v["candidate"] == pytest.approx(runs["candidate_figures"][metric])
        assert v["change"] == pytest.approx(_change(runs, metric))
    assert verdicts["tpot_p99"]["passed"] is None  # reported, not gated
    # Measured against replayed for both runs: the replay's figures from each manifest.
    for label in ("baseline", "candidate"):
        (bench,) = doc[label]["benches"]
        manifest = json.loads((runs[label] / "verify.json").read_text())
        replayed = manifest["benchmarks"][0]["share"]["replayed"]
        assert bench["replayed"] == replayed
        assert bench["figures"]["ttft_p99_s"] == pytest.approx(runs[f"{label}_figures"]["ttft_p99"])
        assert f"{label} vllm (" in result.output
    assert "measured / replayed" in result.output


def test_gate_missed_fails_naming_the_metric(runs: dict) -> None:
    """Throughput asked up 29% where it held: exit 1, that gate marked FAIL."""
    result = _invoke(runs, "--gate", "ttft_p99=-10%,throughput=+29%")
    assert result.exit_code == EXIT_FINDINGS, result.output
    assert "1 of 2 gates failed" in result.output
    line = next(x for x in result.output.splitlines() if "(gate throughput=+29%)" in x)
    assert line.split()[0] == "FAIL"
    ttft = next(x for x in result.output.splitlines() if "(gate ttft_p99=-10%)" in x)
    assert ttft.split()[0] == "ok"


def test_a_latency_may_be_bounded_upwards(runs: dict) -> None:
    """ttft_p99=+5% (up at most 5%) passes a drop; ttft_p99=-60% asks more than was reached."""
    assert _change(runs, "ttft_p99") > -0.60
    assert _invoke(runs, "--gate", "ttft_p99=+5%").exit_code == EXIT_OK
    assert _invoke(runs, "--gate", "ttft_p99=-60%").exit_code == EXIT_FINDINGS


@pytest.mark.parametrize(
    ("gate", "words"),
    [
        ("ttft_p99=25%", ["'ttft_p99=25%'", "a sign and a percent"]),
        ("ttft_p99=-25", ["'ttft_p99=-25'", "METRIC=+N%"]),
        ("latency=-25%", ["unknown metric 'latency'", "ttft_p99"]),
        ("ttft_p99=-25%,ttft_p99=-30%", ["'ttft_p99' is gated twice"]),
        ("", ["expected METRIC=+N%"]),
    ],
)
def test_malformed_gate_is_one_line(runs: dict, gate: str, words: list[str]) -> None:
    """A gate that does not parse: exit 2, one line saying what is expected."""
    one_error_line(_invoke(runs, "--gate", gate), *words)


def test_gate_needs_two_folders_of_one_trace(runs: dict, tmp_path: Path) -> None:
    """--gate with one folder, and two folders from different traces: exit 2, one line each."""
    result = runner.invoke(
        app, ["verify", "--results", str(runs["baseline"]), "--gate", "ttft_p99=-25%"]
    )
    one_error_line(result, "--gate compares two runs")
    result = _invoke(runs, "-o", str(tmp_path / "measured.yaml"))
    one_error_line(result, "measured.yaml", "use .json (the comparison)")
    assert not (tmp_path / "measured.yaml").exists()
    three = [str(runs["baseline"])] * 3
    result = runner.invoke(app, ["verify", *(x for r in three for x in ("--results", r))])
    one_error_line(result, "give one folder, or two")
    other = write_bursty_trace(tmp_path / "other.jsonl", seed=9)
    plan = tmp_path / "plan.yaml"
    plan.write_text(CANDIDATE)
    folder = tmp_path / "other"
    made = runner.invoke(app, ["verify", str(other), "--plan", str(plan), "-o", str(folder)])
    assert made.exit_code == EXIT_OK, made.output
    _write_result(folder, True)
    result = runner.invoke(
        app, ["verify", "--results", str(runs["baseline"]), "--results", str(folder)]
    )
    one_error_line(result, "different traces")
