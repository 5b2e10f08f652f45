"""Stage profiler wired into analyze: JSON contract keys, stated defaults, measured/calibrated."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from kvadvisor.cli import EXIT_USER_ERROR, app
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.report.jsonreport import JsonRenderer
from kvadvisor.sections.profile import ProfileOptions, build_perf_model, profile_workload
from kvadvisor.trace.schema import build_trace

runner = CliRunner()


def _trace(cols: dict):
    return build_trace(pa.table(cols), path="t", source_format="test", block_tokens=None)


def _measured_trace(n: int, measured_every: int = 1):
    """A trace whose TTFT/e2e come from a known deployment (compute x0.8, memory x0.9)."""
    pm, _, _, _ = build_perf_model(ProfileOptions(model="llama-3.1-8b", gpu="h100-sxm", tp=1))
    truth = pm.with_efficiency(
        pm.efficiency.scaled("truth", 0.8, 0.9, pm.efficiency.step_overhead_us)
    )
    rng = np.random.default_rng(3)
    arrival = np.arange(n) * 30.0  # one at a time: batch 1, no queueing
    inp = rng.integers(200, 6000, n)
    out = rng.integers(20, 400, n)
    prefill = truth.prefill_s(inp.astype(float), np.zeros(n))
    step = truth.decode_step_s(np.ones(n), truth.kv_rank_bytes(inp + 1 + (out - 2) / 2))
    ttft = prefill * np.exp(rng.normal(0, 0.02, n))
    e2e = ttft + (out - 1) * step * np.exp(rng.normal(0, 0.02, n))
    keep = (np.arange(n) % measured_every) == 0
    return _trace(
        {
            "arrival_s": arrival,
            "input_tokens": inp,
            "output_tokens": out,
            "ttft_s": pa.array(np.where(keep, ttft, np.nan), from_pandas=True),
            "e2e_s": pa.array(np.where(keep, e2e, np.nan), from_pandas=True),
        }
    )


def test_contract_keys_and_assumed_defaults() -> None:
    """The contract's keys are there with their names; defaults are reported as assumed."""
    trace = _trace(
        {
            "arrival_s": [0.0, 1.0, 2.0],
            "input_tokens": [1000, 2000, 3000],
            "output_tokens": [10, 20, 30],
        }
    )
    # The stage profiler's own (modeled) split: with the replay on, analyze replaces it by the
    # closed-loop split of the recommended deployment (tested with the replay).
    report = analyze(trace, AnalyzeOptions(replay=False), version="t", generated_at="now")
    doc = json.loads(JsonRenderer().render(report))
    assert {"name", "kv_bytes_per_token"} <= set(doc["model"])
    assert {"source", "prefill_s", "decode_s", "prefill_share"} <= set(doc["stage_split"])
    for side in ("write", "read"):
        assert {"mean_bytes_per_s", "p99_bytes_per_s", "peak_bytes_per_s"} <= set(doc["io"][side])
    assert "window_s" in doc["io"]
    assert doc["model"]["name"] == "llama-3.1-70b" and doc["model"]["assumed"] is True
    assert doc["model"]["kv_bytes_per_token"] == 327_680
    assert doc["model"]["deployment"]["gpu"] == "h200"
    assert any("assumed" in n for n in doc["model"]["notes"])
    assert doc["stage_split"]["source"] == "modeled"
    assert doc["io"]["read"]["mean_bytes_per_s"] is None  # unknown without hits, not zero
    assert doc["io"]["write"]["mean_bytes_per_s"] > 0
    # Without hits every prompt token is written once: (1000 + 2000 + 3000) x 327,680 B.
    assert doc["io"]["write"]["bytes_total"] == 6000 * 327_680


def test_cached_tokens_give_read_demand() -> None:
    """Engine-reported cached_tokens make the read side known and cut prefill."""
    trace = _trace(
        {
            "arrival_s": [0.0, 1.0],
            "input_tokens": [1024, 1024],
            "output_tokens": [2, 2],
            "cached_tokens": [0, 512],
        }
    )
    report = analyze(trace, AnalyzeOptions(), version="t", generated_at="now")
    assert report.io.read_known
    assert report.io.read.bytes_total == 512 * 327_680
    assert report.stage_split.hits_source == "cached_tokens"
    assert report.stage_split.prefill_s_saved_by_reuse > 0


def test_fully_measured_trace_is_measured_and_fit() -> None:
    """Every row measured: the split is measured; the fit reports held-out error."""
    split = profile_workload(
        _measured_trace(60), ProfileOptions(model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    ).stage_split
    assert split.source == "measured"
    cal = split.calibration
    assert cal is not None and cal.heldout_rows == 12
    assert cal.efficiency["gemm_efficiency"] == pytest.approx(
        0.8 * cal.prior_efficiency["gemm_efficiency"], rel=0.05
    )
    assert cal.prefill_heldout.mape < 0.05 < cal.prefill_heldout_prior.mape


def test_partly_measured_trace_is_calibrated() -> None:
    """Half the rows measured: calibrated, and modelled rows use the fitted factors."""
    split = profile_workload(
        _measured_trace(80, measured_every=2),
        ProfileOptions(model="llama-3.1-8b", gpu="h100-sxm", tp=1),
    ).stage_split
    assert split.source == "calibrated"
    assert split.measured_requests == 40
    assert any("fitted" in n for n in split.notes)


def test_cli_options(tmp_path) -> None:
    """--model (HF id) --gpu --kv-dtype --tp --window --chunk-tokens reach the report."""
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"arrival_s": [0.0, 0.5], "input_tokens": [3000, 100], "output_tokens": [5, 5]}),
        path,
    )
    out = tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "analyze",
            str(path),
            "-o",
            str(out),
            "--model",
            "Qwen/Qwen3-32B",
            "--gpu",
            "h20",
            "--kv-dtype",
            "fp8",
            "--tp",
            "4",
            "--window",
            "0.5",
            "--chunk-tokens",
            "128",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["model"]["name"] == "qwen3-32b" and doc["model"]["assumed"] is False
    assert doc["model"]["kv_bytes_per_token"] == 131_072
    assert doc["model"]["kv_bytes_per_token_per_gpu"] == 32_768
    assert doc["model"]["deployment"] == {
        **doc["model"]["deployment"],
        "gpu": "h20",
        "tp": 4,
        "gpu_assumed": False,
        "kv_dtype": "fp8",
    }
    assert doc["io"]["window_s"] == 0.5 and doc["io"]["chunk_tokens"] == 128


def test_cli_unknown_gpu_is_one_line(tmp_path) -> None:
    """A bad --gpu is exit 2 with a suggestion and no traceback."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"arrival_s": [0.0], "input_tokens": [10], "output_tokens": [5]}), path)
    result = runner.invoke(app, ["analyze", str(path), "--gpu", "h2000"])
    assert result.exit_code == EXIT_USER_ERROR
    assert "Traceback" not in result.output and "did you mean" in result.output


def test_model_from_the_trace_model_column() -> None:
    """Without --model, a trace whose model column names one catalog model uses it."""
    trace = _trace(
        {
            "arrival_s": [0.0, 1.0],
            "input_tokens": [100, 200],
            "output_tokens": [5, 5],
            "model": ["Qwen/Qwen3-32B", "Qwen/Qwen3-32B"],
        }
    )
    model = profile_workload(trace, ProfileOptions()).model
    assert model.name == "qwen3-32b" and not model.assumed
    assert any("model column" in n for n in model.notes)
    mixed = _trace(
        {
            "arrival_s": [0.0, 1.0],
            "input_tokens": [100, 200],
            "output_tokens": [5, 5],
            "model": ["qwen3-32b", "llama-3.1-8b"],
        }
    )
    assert profile_workload(mixed, ProfileOptions()).model.assumed


def test_published_dtype_expert_parallelism_and_step_model_reach_the_report(tmp_path) -> None:
    """DeepSeek-V3 runs its FP8 checkpoint by default; --ep reaches it; the step model is named."""
    trace = _trace({"arrival_s": [0.0, 1.0], "input_tokens": [1000, 2000], "output_tokens": [5, 9]})
    pm, spec, notes, _ = build_perf_model(
        ProfileOptions(model="deepseek-v3", gpu="h200", tp=8, ep=8)
    )
    assert (pm.weight_dtype, pm.ep) == ("fp8", 8)
    assert any("published dtype (fp8" in n for n in notes)
    report = analyze(
        trace,
        AnalyzeOptions(model="deepseek-v3", gpu="h200", tp=8, ep=8),
        version="t",
        generated_at="now",
    )
    dep = report.model.deployment
    assert dep.weight_dtype == "fp8"
    assert dep.step_model in ("roofline", "silicon")
    assert dep.step_model_reason.startswith(dep.step_model)
    # A dense model ignores --ep; an --ep that does not divide --tp is one user error.
    dense, _, _, _ = build_perf_model(ProfileOptions(model="qwen3-32b", gpu="h200", tp=2, ep=4))
    assert dense.ep == 1
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"arrival_s": [0.0], "input_tokens": [10], "output_tokens": [2]}), path)
    args = ["analyze", str(path), "-q", "--model", "deepseek-v3", "--tp", "8", "--ep", "3"]
    bad = runner.invoke(app, args)
    assert bad.exit_code == EXIT_USER_ERROR
    assert "--ep must divide --tp (8), got 3" in bad.output
