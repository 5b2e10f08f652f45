"""`kvadvisor replay` and the deployment keys of plan.yaml: outputs, defaults, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pyarrow.parquet as pq
import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.cli import EXIT_OK, app
from kvadvisor.errors import ConfigError
from kvadvisor.fleet.fromplan import resolve_plan
from kvadvisor.plan import load_plan
from kvadvisor.plan.loader import PlanError
from kvadvisor.report.replayjson import replay_schema
from kvadvisor.units.format import number

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
AZURE = REPO / "sample_traces" / "azure_code_head.csv.zst"

AGGREGATED = """\
name: agg
model: {name: qwen3-32b}
slo: {ttft_p99: 5 s}
stages:
  serving:
    instance: p5e.48xlarge
    count: 1
    gpus_per_replica: 2
    router: least_outstanding
    scheduler: {max_num_batched_tokens: 4096, max_num_seqs: 128, preemption: recompute}
    write_policy: write_through
    tiers:
      - name: host
        scope: replica
        storage: {kind: dram, read_bandwidth: 50 GB/s, write_bandwidth: 50 GB/s, latency: 10 us}
        capacity: 200 GB
      - name: nvme
        storage: nvme-gen4-x4
        devices: 8
        capacity: 10 TB
        write_buffer: 4 GB
"""

DISAGGREGATED = """\
name: pd
model: {name: qwen3-32b, tp: 2}
topology: disaggregated
pd_link: {bandwidth: 25 GB/s, efficiency: 0.8, latency: 20 us}
stages:
  prefill:
    instance: p5e.48xlarge
    count: 1
  decode:
    instance: p5e.48xlarge
    count: 1
"""


def write(tmp_path: Path, text: str, name: str = "plan.yaml") -> Path:
    """A plan file in the test's folder."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_replay_writes_json_html_and_request_rows(tmp_path: Path) -> None:
    """The JSON validates against its schema; the page has the charts; one row per request."""
    plan = write(tmp_path, AGGREGATED)
    out_json, out_html, rows = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "req.parquet"
    result = runner.invoke(
        app,
        [
            "replay",
            str(MOONCAKE),
            "--plan",
            str(plan),
            "-o",
            str(out_json),
            "-o",
            str(out_html),
            "--requests-out",
            str(rows),
            "--slo",
            "ttft_p90=2s,tpot_p90=50ms",
        ],
    )
    assert result.exit_code == EXIT_OK, result.output
    doc = json.loads(out_json.read_text(encoding="utf-8"))
    jsonschema.validate(doc, replay_schema())
    rp = doc["replay"]
    assert rp["requests"]["count"] == 400
    assert set(rp["slo"]["targets"]) == {"ttft_p99_s", "ttft_p90_s", "tpot_p90_s"}
    assert [t["name"] for t in rp["tiers"]] == ["host", "nvme"]
    assert rp["stages"][0]["replicas"] == 4  # 8 GPUs, 2 per replica
    page = out_html.read_text(encoding="utf-8")
    for anchor in ('id="latency"', 'id="queue"', 'id="tiers"', "<svg"):
        assert anchor in page
    table = pq.read_table(rows)
    assert table.num_rows == 400
    assert {"ttft_s", "tpot_s", "queue_s", "replica", "hit_tokens"} <= set(table.column_names)
    _one_unit_per_quantity(result.stdout, rp)


def _one_unit_per_quantity(text: str, rp: dict) -> None:  # type: ignore[type-arg]
    """Each quantity in the one unit its line names, figures equal to the JSON's."""
    lines = {line.strip().split(":")[0]: line for line in text.splitlines()}
    r, split = rp["requests"], rp["stage_split"]
    assert lines["TTFT (s)"].endswith(f"p99 {number(r['ttft_s']['p99'])}")
    assert lines["TPOT (ms)"].endswith(f"p99 {number(r['tpot_s']['p99'] * 1e3)}")
    gpu_h = lines["GPU time (GPU-hours)"]
    assert f"prefill {number(split['prefill_gpu_s'] / 3600)}," in gpu_h
    assert "SLO TTFT p99 ≤ 5 s: " in text and "SLO TPOT p90 ≤ 50 ms: " in text
    for line in (v for k, v in lines.items() if not k.startswith(("SLO", "OVERLOADED"))):
        # No figure carries a unit of its own: "812 ms ... 3.4 s" read as one scale.
        assert not re.search(r"\d (ms|s|min|h|GB/s|MB/s)\b", line), line
    said = [v for k, v in lines.items() if k.startswith(("SLO", "OVERLOADED"))]
    for line in said:  # a sentence quotes its figures in one unit too
        assert not (re.search(r"\d ms\b", line) and re.search(r"\d s\b", line)), line
    tier = next(v for k, v in lines.items() if k.startswith("tier serving/host"))
    host = rp["tiers"][0]
    assert f"read mean {number(host['read_bytes_per_s']['mean'] / 1e9)}," in tier


def test_disaggregated_plan_replays_with_its_link(tmp_path: Path) -> None:
    """Prefill and decode stages, the link at 25 GB/s x 0.8 per decode instance."""
    dep, notes = resolve_plan(load_plan(write(tmp_path, DISAGGREGATED)))
    assert dep.link is not None and dep.link.bytes_per_s == pytest.approx(20e9)
    assert dep.link.latency_s == pytest.approx(20e-6)
    assert [s.replicas for s in dep.stages] == [4, 4]  # 8 GPUs / TP 2
    # vLLM's batch defaults for a >= 70 GiB GPU other than the A100
    assert dep.stages[0].scheduler.max_batched_tokens == 8192
    assert dep.stages[0].scheduler.max_seqs == 1024
    result = runner.invoke(
        app, ["replay", str(AZURE), "--plan", str(write(tmp_path, DISAGGREGATED))]
    )
    assert result.exit_code == EXIT_OK, result.output
    assert "P-to-D link (GB/s per decode instance): mean " in result.stdout


def test_old_plans_still_load_and_convert_or_say_what_is_missing() -> None:
    """The shipped example plans (no deployment keys) load, and the replay takes them.

    Or it names the figure it lacks (a tier whose catalog entry publishes no bandwidth) and
    how to give it.
    """
    for path in (REPO / "examples" / "plans").glob("*.yaml"):
        plan = load_plan(path)
        assert plan.topology == "disaggregated"
        try:
            dep, _ = resolve_plan(plan)
        except ConfigError as error:
            assert "storage.read_bandwidth" in str(error) or "storage.write_bandwidth" in str(
                error
            ), error
        else:
            assert dep.link is not None


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        (
            AGGREGATED.replace("router:", "ruoter:"),
            ["stages.serving.ruoter", "did you mean 'router'"],
        ),
        (
            AGGREGATED.replace("capacity: 200 GB", "capacity: 200 GB/s"),
            ["stages.serving.tiers[0].capacity", "rate unit", "2 TB"],
        ),
        (
            AGGREGATED.replace("capacity: 200 GB", "capacity: 0 GB"),
            ["stages.serving.tiers[0].capacity", "above zero"],
        ),
        (
            AGGREGATED.replace("capacity: 200 GB", "capacity: -5 GB"),
            ["stages.serving.tiers[0].capacity", "negative"],
        ),
        (
            AGGREGATED.replace("scope: replica", "scope: rack"),
            ["stages.serving.tiers[0].scope", "replica, instance, pooled"],
        ),
        (
            AGGREGATED.replace("max_num_seqs: 128", "max_num_seqs: 0"),
            ["stages.serving.scheduler.max_num_seqs", ">= 1"],
        ),
        (AGGREGATED.replace("name: agg", "name: agg\ntopology: disaggregated"), ["topology"]),
        (
            DISAGGREGATED.replace("efficiency: 0.8", "efficiency: 1.5"),
            ["pd_link.efficiency", "(0, 1]"],
        ),
        (
            AGGREGATED.replace("gpus_per_replica: 2", "gpus_per_replica: 16"),
            ["stages.serving.gpus_per_replica", "at most 8"],
        ),
    ],
)
def test_bad_deployment_keys_are_one_line_exit_2(
    tmp_path: Path, text: str, needles: list[str]
) -> None:
    """Unknown keys, wrong unit kinds, zero or negative capacities: the key path and the fix."""
    result = runner.invoke(app, ["replay", str(AZURE), "--plan", str(write(tmp_path, text))])
    one_error_line(result, *needles)


def test_a_model_that_does_not_fit_exits_2_with_the_numbers(tmp_path: Path) -> None:
    """Llama-3.1-70B (70.55B parameters from its shapes: 141.1e9 bytes of bf16) on one H200.

    141.1e9 / 2^30 = 131.4 GiB, shown in binary units as every size is.
    """
    text = AGGREGATED.replace("qwen3-32b", "llama-3.1-70b").replace(
        "gpus_per_replica: 2", "gpus_per_replica: 1"
    )
    result = runner.invoke(app, ["replay", str(AZURE), "--plan", str(write(tmp_path, text))])
    line = one_error_line(result, "gpus_per_replica", "does not fit", "GiB per GPU", "usable")
    assert "131 GiB per GPU" in line


def test_an_overloaded_fleet_still_ends_and_says_so(tmp_path: Path) -> None:
    """Traffic 50x faster than one small replica serves: the drain cap ends it, and it says so.

    The 400 requests take about 50 s of this replica's time, so a 10 s drain cap cuts them.
    """
    text = AGGREGATED.replace("slo: {ttft_p99: 5 s}", "traffic: {scale: 50}").replace(
        "gpus_per_replica: 2", "gpus_per_replica: 2\n    replicas_per_instance: 1"
    )
    out = tmp_path / "r.json"
    result = runner.invoke(
        app,
        ["replay", str(AZURE), "--plan", str(write(tmp_path, text)), "--drain-cap", "10"]
        + ["-o", str(out)],
    )
    assert result.exit_code == EXIT_OK, result.output
    doc = json.loads(out.read_text(encoding="utf-8"))["replay"]
    assert doc["overload"]["overloaded"] is True
    assert doc["requests"]["unfinished"] > 0
    assert "OVERLOADED" in result.stdout


@pytest.mark.parametrize("slo", ["ttft=2s", "ttft_p90=2", "latency_p90=2s", "ttft_p90=2 GB"])
def test_bad_slo_option_is_one_line(tmp_path: Path, slo: str) -> None:
    """--slo takes METRIC_pNN=TIME."""
    result = runner.invoke(
        app, ["replay", str(AZURE), "--plan", str(write(tmp_path, AGGREGATED)), "--slo", slo]
    )
    one_error_line(result, "--slo")


def test_serving_and_prefill_blocks_do_not_mix(tmp_path: Path) -> None:
    """One aggregated block, or prefill and decode: never both."""
    text = AGGREGATED + "  prefill:\n    instance: p5e.48xlarge\n"
    with pytest.raises(PlanError, match="stages.serving"):
        load_plan(write(tmp_path, text))
