"""`verify --results BASELINE --results CANDIDATE --gate`: the A/B gate over two result folders.

Two folders are generated from one trace: the two-node plan without its NVMe tier (baseline)
and with it (candidate). Each gets its serving benchmark's output in the tool's own format
(tests/bench_outputs.py: every key `vllm bench serve --save-result --save-detailed` and SGLang's
`bench_serving --output-details` write, from their sources at the commits in
tests/fixtures/bench_keys/), for the folder's own dataset, with toy timings (TTFT 50 ms + 0.1 ms
per prompt token the engine computes, 20 ms per output token): the baseline computes every
prompt token, the candidate only those no earlier request of its dataset shared (the prefix
ids). The expected figures are computed here from the timings written, independently of
kvadvisor's reading. The storage side is fio's own JSON, from the real fio run on the
candidate's job file (test_candidate_storage_is_judged_beside_the_gate).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from analysis_cache import device_to_itself
from bench_outputs import (
    Timings,
    bench_keys,
    vllm_metric_keys,
    write_sglang,
    write_vllm,
)
from cli_checks import one_error_line
from test_verify_fio import _direct_io_dir
from typer.testing import CliRunner
from verify_fixtures import SERVING_PLAN, write_bursty_trace

from kvadvisor.cli import EXIT_FINDINGS, EXIT_OK, app

runner = CliRunner()
CANDIDATE = SERVING_PLAN.replace("    count: 1\n", "    count: 2\n    router: prefix_aware\n")
BASELINE = CANDIDATE.replace("name: llama8b-serving", "name: no-tier").split("    tiers:")[0]
MODEL_ID = "meta-llama/Llama-3.1-8B-Instruct"
ITL_S = 0.02
# The dataset each engine's benchmark replays, its time unit and its prefix block (SGLang's
# mooncake dataset re-cuts the ids to 128-token blocks, docs/verify.md).
DATASETS = {
    "vllm": ("bench/trace.timed.jsonl", 1.0),
    "sglang": ("bench/trace.mooncake.jsonl", 1e-3),
}


def _timings(folder: Path, engine: str, reuse: bool) -> Timings:
    """Toy timings for the folder's dataset of ``engine``: a cached prefix skips its compute."""
    name, to_s = DATASETS[engine]
    rows = [json.loads(x) for x in (folder / name).read_text().split()]
    spec = next(
        b
        for b in json.loads((folder / "verify.json").read_text())["benchmarks"]
        if b["engine"] == engine
    )
    block = spec["chunk_hash_size"] if engine == "vllm" else 128
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
    first = rows[0]["timestamp"]
    return Timings(
        arrivals=[(r["timestamp"] - first) * to_s for r in rows],
        input_lens=[r["input_length"] for r in rows],
        output_lens=[r["output_length"] for r in rows],
        ttfts=ttfts,
        itl_s=ITL_S,
    )


def _figures(t: Timings) -> dict[str, float]:
    """TTFT p50/p99 and output tokens per second, computed here from the timings written.

    The span is from the first arrival to the last completion: vLLM's start times give it, and
    SGLang's output (no start times) gives it as its run's ``duration``.
    """
    span = (np.array(t.arrivals) + np.array(t.latencies())).max() - min(t.arrivals)
    return {
        "ttft_p50": float(np.percentile(t.ttfts, 50)),
        "ttft_p99": float(np.percentile(t.ttfts, 99)),
        "throughput": float(np.sum(t.output_lens) / span),
    }


def _write_result(folder: Path, reuse: bool, engine: str = "vllm") -> dict:
    """The engine's benchmark output in the folder's results/; returns the expected figures."""
    t = _timings(folder, engine, reuse)
    if engine == "vllm":
        write_vllm(folder / "results" / "vllm-bench.json", t, MODEL_ID)
    else:
        write_sglang(folder / "results" / "sglang-bench.jsonl", t)
    return _figures(t)


def _generate(base: Path, trace: Path) -> dict:
    out = {}
    for name, text in (("baseline", BASELINE), ("candidate", CANDIDATE)):
        plan = base / f"{name}.yaml"
        plan.write_text(text)
        folder = base / name
        result = runner.invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(folder)])
        assert result.exit_code == EXIT_OK, result.output
        out[name] = folder
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both folders generated from one trace, each with its vLLM benchmark result written."""
    base = tmp_path_factory.mktemp("verify-gate")
    trace = write_bursty_trace(base / "t.jsonl")
    out = _generate(base, trace)
    for name, reuse in (("baseline", False), ("candidate", True)):
        out[f"{name}_figures"] = _write_result(out[name], reuse)
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


# --- the result files are the tools' own -------------------------------------------------------


def test_result_files_carry_the_tools_keys(runs: dict) -> None:
    """VLLM's file has every key its serve.py writes for bench/vllm.sh's options; SGLang's too."""
    doc = json.loads((runs["candidate"] / "results" / "vllm-bench.json").read_text())
    fixture = bench_keys("vllm-bench-serve")
    assert list(doc) == fixture["keys"] + vllm_metric_keys()
    # The metric keys are those of the percentiles the generated script asks for.
    script = (runs["candidate"] / "bench" / "vllm.sh").read_text()
    metrics = re.search(r"--percentile-metrics (\S+)", script).group(1).split(",")
    percentiles = re.search(r"--metric-percentiles (\S+)", script).group(1).split(",")
    want = {
        f"{w}_{m}_ms"
        for m in metrics
        for w in ["mean", "median", "std"] + [f"p{p}" for p in percentiles]
    }
    assert want == set(vllm_metric_keys())
    assert "--save-result --save-detailed" in script
    sglang = runs["candidate"].parent / "sglang-keys.jsonl"
    write_sglang(sglang, _timings(runs["candidate"], "sglang", True))
    (line,) = sglang.read_text().splitlines()
    assert list(json.loads(line)) == bench_keys("sglang-bench-serving")["keys"]
    assert "--output-details" in (runs["candidate"] / "bench" / "sglang.sh").read_text()
    for tool in ("vllm-bench-serve", "sglang-bench-serving"):
        src = bench_keys(tool)["source"]
        assert re.fullmatch(r"[0-9a-f]{40}", src["commit"]) and src["repo"] and src["path"]


@pytest.fixture(scope="module")
def sglang_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same two folders with SGLang's bench_serving output instead of vLLM's."""
    base = tmp_path_factory.mktemp("verify-gate-sglang")
    out = _generate(base, write_bursty_trace(base / "t.jsonl"))
    for name, reuse in (("baseline", False), ("candidate", True)):
        out[f"{name}_figures"] = _write_result(out[name], reuse, "sglang")
    return out


def test_sglang_gate_passes_and_its_throughput_is_over_the_runs_duration(
    sglang_runs: dict, tmp_path: Path
) -> None:
    """SGLang's output has no start times: throughput is over the run's `duration`, both runs."""
    runs = sglang_runs
    report = tmp_path / "ab.json"
    result = _invoke(
        runs, "--gate", "ttft_p50=-50%,ttft_p99=-10%,throughput=-5%", "-o", str(report)
    )
    assert result.exit_code == EXIT_OK, result.output
    assert "every gate passes (3)" in result.output
    doc = json.loads(report.read_text())
    verdicts = {v["metric"]: v for v in doc["gate"]["verdicts"]}
    for metric in ("ttft_p50", "ttft_p99", "throughput"):
        assert verdicts[metric]["baseline"] == pytest.approx(runs["baseline_figures"][metric])
        assert verdicts[metric]["candidate"] == pytest.approx(runs["candidate_figures"][metric])
    for label in ("baseline", "candidate"):
        (bench,) = doc[label]["benches"]
        assert bench["engine"] == "sglang"
        line = (runs[label] / "results" / "sglang-bench.jsonl").read_text()
        written = json.loads(line)
        # the tool's own output_throughput: the same tokens over the same duration
        assert bench["figures"]["output_tokens_per_s"] == pytest.approx(
            written["output_throughput"]
        )
        assert bench["replayed"] is not None  # measured against replayed, for both runs
        assert f"{label} sglang (" in result.output
    assert "measured / replayed" in result.output


def test_sglang_gate_missed_fails(sglang_runs: dict) -> None:
    """Throughput asked up 29% of SGLang's runs where it held: exit 1, that gate FAIL."""
    result = _invoke(sglang_runs, "--gate", "ttft_p99=-10%,throughput=+29%")
    assert result.exit_code == EXIT_FINDINGS, result.output
    line = next(x for x in result.output.splitlines() if "(gate throughput=+29%)" in x)
    assert line.split()[0] == "FAIL"


def test_candidate_storage_is_judged_beside_the_gate(
    runs: dict, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The candidate's NVMe tier measured by the real fio: judged beside the serving gates.

    Its phases are reported in the A/B run with fio's figures, and a p99 or burst phase below
    its rate fails the run though every serving gate is met (a candidate check at --fail-on
    error). The tier's I/O is one 32 MiB chunk (256 tokens of Llama-3.1-8B's KV), so the file
    holds four of them.
    """
    fio = shutil.which("fio")
    if fio is None:
        if os.environ.get("CI"):
            pytest.fail("fio is not installed (`.ci/run` installs Debian's fio)")
        pytest.skip("fio is not installed: apt-get install fio")
    candidate = tmp_path / "candidate"
    shutil.copytree(runs["candidate"], candidate)
    scratch = _direct_io_dir([tmp_path / "scratch"])
    job = candidate / "fio" / "serving.nvme.fio"
    if scratch is None:
        scratch = tmp_path / "scratch"
        job.write_text(job.read_text().replace("direct=1", "direct=0"))
    manifest = json.loads((candidate / "verify.json").read_text())
    spec = next(f for f in manifest["fio"] if f["file"] == "fio/serving.nvme.fio")
    env = {
        **os.environ,
        "KVADVISOR_FIO_DIR": str(scratch),
        "KVADVISOR_FIO_SIZE": str(4 * spec["io_bytes"]),
        "KVADVISOR_FIO_RUNTIME": "1",
    }
    with device_to_itself(tmp_path_factory):
        subprocess.run(
            [str(candidate / "run-fio.sh"), "fio/serving.nvme.fio"],
            env=env,
            check=True,
            capture_output=True,
        )
    shutil.rmtree(scratch, ignore_errors=True)
    fio_doc = json.loads((candidate / "results" / "serving.nvme.json").read_text())
    jobs = {j["jobname"]: j for j in fio_doc["jobs"]}
    report = tmp_path / "ab.json"
    gate = "ttft_p50=-50%,ttft_p99=-10%,throughput=-5%"
    result = runner.invoke(
        app,
        [
            "verify",
            "--results",
            str(runs["baseline"]),
            "--results",
            str(candidate),
            "--gate",
            gate,
            "-o",
            str(report),
        ],
    )
    assert "every gate passes (3)" in result.output
    doc = json.loads(report.read_text())
    phases = {p["phase"]: p for p in doc["candidate"]["phases"] if not p["gds"]}
    failed_error = False
    for p in spec["phases"]:
        got = phases[p["phase"]]
        measured = jobs[p["name"]]
        for direction, rate in p["rates_bytes_per_s"].items():
            bw = measured[direction]["bw_bytes"]
            assert got["measured"][direction]["bytes_per_s"] == pytest.approx(bw)
            if p["phase"] == "p99" and bw < 0.95 * rate:
                failed_error = True
        if p["phase"] in ("p99", "burst") and got["status"] == "fail":
            failed_error = True
    # Exit 1 exactly when a candidate phase at error severity failed (the gates all passed).
    assert result.exit_code == (EXIT_FINDINGS if failed_error else EXIT_OK), result.output
    assert doc["baseline"]["phases"] == []  # the baseline has no tier: no fio job
