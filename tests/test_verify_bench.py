"""Serving-benchmark datasets (lengths, arrivals, prefix ids) and their outputs read back.

The benchmark outputs here are built in code in vLLM's ``--save-detailed`` layout from the
generated dataset, with toy timings (TTFT growing with the prompt, 20 ms a token): they test
the reading and the verdicts, not any engine.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner
from verify_fixtures import MODEL_PLAN, write_bursty_trace

from kvadvisor.cli import EXIT_FINDINGS, EXIT_OK, app
from kvadvisor.trace import read_trace
from kvadvisor.verifyjobs.bench import ID_MASK, ID_MIX, bench_datasets, recut_ids

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
AZURE = REPO / "sample_traces" / "azure_code_head.csv.zst"


def reference_recut(hashes: list[list[int]], inputs: list[int], block: int, size: int):
    """The re-cut ids, one request and one sub-block at a time."""
    out = []
    for row, (h, n) in enumerate(zip(hashes, inputs, strict=True)):
        ids = []
        for j in range(math.ceil(n / size)):
            last = min((j + 1) * size, n) - 1
            base = h[min(last // block, len(h) - 1)] if h else -1 - row
            mixed = ((base % 2**64) * int(ID_MIX) + j) % 2**64
            ids.append(mixed & int(ID_MASK))
        out.append(ids)
    return out


def test_recut_matches_the_reference() -> None:
    """Vectorised re-cut == the loop, for blocks bigger and smaller than the new size."""
    hashes = [[11, 12, 13], [11, 12, 99], [5], []]
    inputs = [1500, 1100, 300, 200]
    for block, size in ((512, 128), (16, 128), (512, 512)):
        flat = np.array([x for h in hashes for x in h], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum([len(h) for h in hashes])]).astype(np.int64)
        ids, starts = recut_ids(flat, offsets, block, np.array(inputs), size)
        got = [ids[starts[i] : starts[i + 1]].tolist() for i in range(len(inputs))]
        assert got == reference_recut(hashes, inputs, block, size)


def test_recut_keeps_exactly_the_shared_prefix() -> None:
    """Requests 0 and 1 share 2 blocks of 512: their first 8 ids of 128 agree, then differ."""
    flat = np.array([11, 12, 13, 11, 12, 99], dtype=np.int64)
    ids, starts = recut_ids(flat, np.array([0, 3, 6]), 512, np.array([1536, 1536]), 128)
    a, b = ids[starts[0] : starts[1]], ids[starts[1] : starts[2]]
    assert (a[:8] == b[:8]).all() and not (a[8:] == b[8:]).any()
    assert len(set(a.tolist())) == len(a)  # positions within a block get their own ids


def test_datasets_carry_lengths_arrivals_and_coverage(tmp_path: Path) -> None:
    """Each row: the request's lengths, its arrival × factor, ids covering its prompt."""
    trace = read_trace(write_bursty_trace(tmp_path / "t.jsonl"))
    files, n, block, totals = bench_datasets(trace, 3.0, None)
    assert n == trace.requests == 240 and block == 512
    arrival = trace.column_np("arrival_s")
    vllm = [json.loads(x) for x in files["bench/trace.timed.jsonl"].splitlines()]
    sglang = [json.loads(x) for x in files["bench/trace.mooncake.jsonl"].splitlines()]
    inputs = trace.column_np("input_tokens")
    for i in (0, 17, 239):
        assert vllm[i]["timestamp"] == pytest.approx((arrival[i] - arrival[0]) * 3.0, abs=1e-6)
        assert sglang[i]["timestamp"] == pytest.approx(vllm[i]["timestamp"] * 1000, abs=1e-3)
        assert vllm[i]["input_length"] == sglang[i]["input_length"] == inputs[i]
        assert vllm[i]["output_length"] == 64
        assert len(vllm[i]["hash_ids"]) == math.ceil(inputs[i] / 512)
        assert len(sglang[i]["hash_ids"]) == math.ceil(inputs[i] / 128)
    assert totals["input_tokens_total"] == int(inputs.sum())
    assert totals["replay_s"] == pytest.approx((arrival[-1] - arrival[0]) * 3.0)
    # Prefix reuse survives: some ids recur across requests.
    seen = [i for row in vllm for i in row["hash_ids"]]
    assert len(set(seen)) < len(seen)


def test_trace_without_hashes_gets_fresh_ids() -> None:
    """The Azure excerpt has no hashes: ids cover every prompt and no two requests share."""
    trace = read_trace(AZURE)
    files, n, block, _ = bench_datasets(trace, 1.0, 50)
    rows = [json.loads(x) for x in files["bench/trace.timed.jsonl"].splitlines()]
    assert n == len(rows) == 50 and block == 512
    ids = [i for r in rows for i in r["hash_ids"]]
    assert len(ids) == len(set(ids)) == sum(math.ceil(r["input_length"] / 512) for r in rows)


# --- results read back ---------------------------------------------------------------------


@pytest.fixture()
def model_folder(tmp_path: Path) -> Path:
    """A folder generated for the Llama-3.1-8B plan (no results yet)."""
    trace = write_bursty_trace(tmp_path / "t.jsonl")
    plan = tmp_path / "plan.yaml"
    plan.write_text(MODEL_PLAN)
    out = tmp_path / "jobs"
    result = runner.invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(out)])
    assert result.exit_code == EXIT_OK, result.output
    return out


def write_vllm_result(folder: Path, model_id: str, rows: int | None = None, slow: float = 1.0):
    """A vLLM --save-detailed result for the folder's dataset, with toy timings."""
    data = [json.loads(x) for x in (folder / "bench" / "trace.timed.jsonl").read_text().split()]
    data = data[:rows] if rows is not None else data
    inputs = [d["input_length"] for d in data]
    outputs = [d["output_length"] for d in data]
    ttfts = [slow * (0.05 + 1e-4 * n) for n in inputs]
    itls = [[slow * 0.02] * (o - 1) for o in outputs]
    doc = {
        "backend": "vllm",
        "model_id": model_id,
        "input_lens": inputs,
        "output_lens": outputs,
        "ttfts": ttfts,
        "itls": itls,
        "start_times": [d["timestamp"] for d in data],
        "errors": [""] * len(data),
    }
    (folder / "results").mkdir(exist_ok=True)
    (folder / "results" / "vllm-bench.json").write_text(json.dumps(doc))


def test_benchmark_within_the_slo_passes_and_calibrates(model_folder: Path) -> None:
    """TTFT p99 about 0.46 s under 2 s, TPOT 20 ms under 50 ms; the fit's error is shown."""
    write_vllm_result(model_folder, "meta-llama/Llama-3.1-8B-Instruct")
    result = runner.invoke(app, ["verify", "--results", str(model_folder)])
    assert result.exit_code == EXIT_OK, result.output
    assert "ok   VF03 both vllm benchmark, 240/240 requests" in result.output
    assert "calibrated on" in result.output and "held-out error (MAPE)" in result.output


def test_benchmark_over_the_slo_fails(model_folder: Path) -> None:
    """Three times slower: TPOT 60 ms over the 50 ms SLO: an error, exit 1."""
    write_vllm_result(model_folder, "meta-llama/Llama-3.1-8B-Instruct", slow=3.0)
    result = runner.invoke(app, ["verify", "--results", str(model_folder)])
    assert result.exit_code == EXIT_FINDINGS, result.output
    assert "TPOT p99 60 ms over the SLO 50 ms" in result.output


def test_benchmark_of_another_model_is_refused(model_folder: Path) -> None:
    """A Qwen benchmark for a Llama plan: exit 2, one line naming both."""
    write_vllm_result(model_folder, "Qwen/Qwen3-32B")
    result = runner.invoke(app, ["verify", "--results", str(model_folder)])
    one_error_line(result, "vllm-bench.json", "'Qwen/Qwen3-32B'", "'llama-3.1-8b'")


def test_benchmark_of_another_run_is_refused(model_folder: Path) -> None:
    """100 requests where the folder replays 240: exit 2 naming the counts."""
    write_vllm_result(model_folder, "meta-llama/Llama-3.1-8B-Instruct", rows=100)
    result = runner.invoke(app, ["verify", "--results", str(model_folder)])
    one_error_line(result, "vllm-bench.json", "100 requests", "replays 240")


def test_served_name_from_a_local_path_is_the_plans_model(model_folder: Path) -> None:
    """A model served from a directory named after it is still the plan's model."""
    write_vllm_result(model_folder, "/models/Llama-3.1-8B-Instruct/")
    result = runner.invoke(app, ["verify", "--results", str(model_folder)])
    assert result.exit_code == EXIT_OK, result.output


def test_no_results_yet_is_not_a_failure(model_folder: Path) -> None:
    """A fresh folder: every job listed as without results, exit 0."""
    result = runner.invoke(app, ["verify", "--results", str(model_folder)])
    assert result.exit_code == EXIT_OK, result.output
    assert "skip VF02" in result.output


def test_usage_errors_are_one_line(model_folder: Path, tmp_path: Path) -> None:
    """Half a generation, both modes at once, an output over an input: exit 2 each."""
    one_error_line(runner.invoke(app, ["verify"]), "give TRACE --plan PLAN -o DIR")
    result = runner.invoke(app, ["verify", "t.jsonl", "--results", str(model_folder)])
    one_error_line(result, "--results reads a folder back")
    target = model_folder / "verify.json"
    result = runner.invoke(app, ["verify", "--results", str(model_folder), "-o", str(target)])
    one_error_line(result, "verify.json", "is an input of the verify folder")
    one_error_line(runner.invoke(app, ["verify", "--results", str(tmp_path)]), "no verify.json")


def test_output_folder_of_another_project_is_refused(tmp_path: Path) -> None:
    """-o at a non-empty folder that is not a verify folder (a README.md to lose): exit 2."""
    trace = write_bursty_trace(tmp_path / "t.jsonl")
    plan = tmp_path / "plan.yaml"
    plan.write_text(MODEL_PLAN)
    result = runner.invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(tmp_path)])
    one_error_line(result, "not empty and not a verify folder")
    assert not (tmp_path / "README.md").exists()


def test_review_results_must_match_plan_and_trace(model_folder: Path, tmp_path: Path) -> None:
    """The folder's plan and trace only: another plan, another trace: exit 2 naming them."""
    trace = model_folder.parent / "t.jsonl"
    other = tmp_path / "other.yaml"
    other.write_text(MODEL_PLAN.replace("name: llama8b-h200", "name: other"))
    result = runner.invoke(
        app, ["review", str(trace), "--plan", str(other), "--results", str(model_folder)]
    )
    one_error_line(result, "generated for plan 'llama8b-h200'", "'other'")
    changed = write_bursty_trace(tmp_path / "changed.jsonl", seed=8)
    plan = model_folder.parent / "plan.yaml"
    result = runner.invoke(
        app, ["review", str(changed), "--plan", str(plan), "--results", str(model_folder)]
    )
    one_error_line(result, "generated from another trace")
