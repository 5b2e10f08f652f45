"""The serving benchmark replays one node's routed share: the requests the replay sent there.

Checked against `kvadvisor replay --requests-out` on the same trace and plan (its per-request
rows name each request's replica): the benchmark dataset holds exactly the busiest instance's
requests, at the plan's arrival times, and the manifest's replayed figures are that replay's
percentiles over them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from verify_fixtures import DISK_PLAN, SERVING_PLAN, write_bursty_trace

from kvadvisor.cli import EXIT_OK, app
from kvadvisor.trace import read_trace
from kvadvisor.verifyjobs.share import routed_share

runner = CliRunner()
# Two instances (one H200 replica each) behind the prefix-aware router.
TWO_NODES = SERVING_PLAN.replace("    count: 1\n", "    count: 2\n    router: prefix_aware\n")


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The jobs for the two-node plan, and the replay's own per-request rows."""
    base = tmp_path_factory.mktemp("verify-share")
    trace = write_bursty_trace(base / "t.jsonl")
    plan = base / "plan.yaml"
    plan.write_text(TWO_NODES)
    rows = base / "requests.parquet"
    result = runner.invoke(
        app, ["replay", str(trace), "--plan", str(plan), "--requests-out", str(rows)]
    )
    assert result.exit_code == EXIT_OK, result.output
    out = {}
    for name, extra in (("all", []), ("short", ["--bench-requests", "40"])):
        folder = base / name
        result = runner.invoke(
            app, ["verify", str(trace), "--plan", str(plan), "-o", str(folder), *extra]
        )
        assert result.exit_code == EXIT_OK, result.output
        out[name] = folder
    return {"trace": trace, "rows": pq.read_table(rows).to_pydict(), **out}


def _dataset(folder: Path) -> list[dict]:
    text = (folder / "bench" / "trace.timed.jsonl").read_text()
    return [json.loads(x) for x in text.splitlines()]


def _busiest(rows: dict) -> np.ndarray:
    """Trace rows of the replica (= instance here) that served the most, in arrival order."""
    replica = np.array(rows["replica"])
    counts = np.bincount(replica)
    assert counts.size == 2 and counts.min() > 0  # the router really split the trace
    chosen = int(np.argmax(counts))
    return np.array(rows["request"])[replica == chosen]


def test_dataset_is_the_busiest_nodes_requests(routed: dict) -> None:
    """Lengths and arrivals of exactly that node's requests, from its first arrival."""
    trace = read_trace(routed["trace"])
    mine = np.sort(_busiest(routed["rows"]))
    data = _dataset(routed["all"])
    assert len(data) == mine.size < trace.requests
    inputs = trace.column_np("input_tokens")[mine]
    arrival = trace.column_np("arrival_s")[mine]
    assert [d["input_length"] for d in data] == inputs.tolist()
    got = np.array([d["timestamp"] for d in data])
    assert got == pytest.approx(arrival - arrival[0], abs=1e-6)
    manifest = json.loads((routed["all"] / "verify.json").read_text())
    share = manifest["benchmarks"][0]["share"]
    assert share["from"] == "routed" and share["router"] == "prefix_aware"
    assert share["instances"] == 2 and share["share_requests"] == mine.size
    assert manifest["benchmarks"][0]["requests"] == mine.size


def test_replayed_figures_are_the_replays_over_the_share(routed: dict) -> None:
    """The manifest's TTFT/TPOT p99 and throughput: the replay's rows over those requests."""
    rows = routed["rows"]
    mine = np.sort(_busiest(rows))
    for name, keep in (("all", mine), ("short", mine[:40])):
        manifest = json.loads((routed[name] / "verify.json").read_text())
        replayed = manifest["benchmarks"][0]["share"]["replayed"]
        ttft = np.array(rows["ttft_s"])[keep]
        tpot = np.array(rows["tpot_s"])[keep]
        assert replayed["ttft_p99_s"] == pytest.approx(np.percentile(ttft, 99))
        assert replayed["tpot_p99_s"] == pytest.approx(np.nanpercentile(tpot, 99))
        arrival = np.array(rows["arrival_s"])[keep]
        end = arrival + np.array(rows["e2e_s"])[keep]
        tokens = np.array(rows["output_tokens"])[keep].sum()
        assert replayed["output_tokens_per_s"] == pytest.approx(
            tokens / (end.max() - arrival.min())
        )
    assert len(_dataset(routed["short"])) == 40


def test_script_says_which_requests_it_replays(routed: dict) -> None:
    """The scripts and README name the router and the share."""
    script = (routed["all"] / "bench" / "vllm.sh").read_text()
    mine = _busiest(routed["rows"]).size
    assert "prefix_aware router sent to serving instance" in script
    assert f"({mine} of 240)" in script
    assert f"--num-prompts {mine} " in script


def test_without_a_replay_every_request_is_slowed(tmp_path: Path) -> None:
    """A plan the replay cannot run (no catalog model): the whole trace, stated as such."""
    trace = write_bursty_trace(tmp_path / "t.jsonl")
    plan = tmp_path / "plan.yaml"
    plan.write_text(DISK_PLAN)
    folder = tmp_path / "jobs"
    result = runner.invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(folder)])
    assert result.exit_code == EXIT_OK, result.output
    share = json.loads((folder / "verify.json").read_text())["benchmarks"][0]["share"]
    assert share == {
        "from": "slowed",
        "instances": 1,
        "trace_requests": 240,
        "why": "no closed-loop replay: which requests a node serves is not known",
    }
    assert len(_dataset(folder)) == 240


def test_share_picks_the_busiest_instance_counting_idle_ones() -> None:
    """2 replicas per instance: instance 1 serves 3 of 5 requests; 4 instances, 2 idle."""
    cols = {
        "arrival_s": np.array([0.0, 1.0, 2.0, 3.0, 4.0]),
        "ttft_s": np.array([0.1, 0.2, 0.3, 0.4, 0.5]),
        "tpot_s": np.array([0.01] * 5),
        "e2e_s": np.array([1.0] * 5),
        "output_tokens": np.array([10, 20, 30, 40, 50]),
    }
    # The stage's own order (replicas 3, 0, 2, 1, 2 for trace rows 4, 0, 1, 2, 3): instance
    # 1 holds replicas 2 and 3, so trace rows 4, 1 and 3, replayed in arrival order.
    replica, rows = np.array([3, 0, 2, 1, 2]), np.array([4, 0, 1, 2, 3])
    share = routed_share("serving", "prefix_aware", replica, 2, 4, rows, cols, None)
    assert (share.instance, share.instances, share.share_requests) == (1, 4, 3)
    assert share.rows.tolist() == [1, 3, 4]
    assert share.replayed["ttft_p99_s"] == pytest.approx(np.percentile([0.2, 0.4, 0.5], 99))
    # 110 output tokens from the first arrival (1 s) to the last completion (5 s).
    assert share.replayed["output_tokens_per_s"] == pytest.approx(110 / 4.0)
    assert share.replayed["requests_per_s"] == pytest.approx(3 / 4.0)
    # --bench-requests 2: the first two of the share, and the figures over them only.
    short = routed_share("serving", "prefix_aware", replica, 2, 4, rows, cols, 2)
    assert short.rows.tolist() == [1, 3] and short.share_requests == 3
    assert short.replayed["output_tokens_per_s"] == pytest.approx(60 / 3.0)
    # A tie goes to the lower instance.
    tie = routed_share("serving", "round_robin", np.array([2, 0]), 2, 2, rows[:2], cols, None)
    assert tie.instance == 0 and tie.rows.tolist() == [0]
