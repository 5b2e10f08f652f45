"""CLI for traces: info and convert end to end, and one test per bad-input case (exit 2)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.cli import EXIT_OK, app
from kvadvisor.errors import KvAdvisorWarning
from kvadvisor.trace import read_trace

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "traces"
SAMPLES = REPO / "sample_traces"

runner = CliRunner()


def test_info_on_the_sample_trace() -> None:
    """The info command names the format, size, span, rate, columns and capabilities."""
    result = runner.invoke(app, ["info", str(SAMPLES / "mooncake_conversation.parquet")])
    assert result.exit_code == EXIT_OK, result.output
    out = result.stdout
    assert "canonical parquet (converted from Mooncake JSONL)" in out
    assert "requests      12,031 (0 failed)" in out
    # 3,536.999 s is 58.95 min, three digits 58.9; 12,031 / 3,536.999 s = 3.401/s, "3.40" -> 3.4.
    assert "time span     58.9 min" in out
    assert "arrival rate  3.4 requests/s" in out
    assert "columns       arrival_s, input_tokens, output_tokens, block_hashes" in out
    assert "block_tokens  512" in out
    assert "no TTFT: stage times will be modeled" in out


def test_info_capabilities_follow_columns() -> None:
    """No hashes and measured TTFT are both said."""
    result = runner.invoke(app, ["info", str(SAMPLES / "vllm_bench_appended.json")])
    assert result.exit_code == EXIT_OK, result.output
    assert "no block hashes: prefix reuse cannot be measured" in result.stdout
    assert "TTFT present: stage times will be measured, not modeled" in result.stdout
    assert "requests      60 (1 failed)" in result.stdout
    llmperf = runner.invoke(app, ["info", str(SAMPLES / "llmperf_individual_responses.json")])
    assert "arrival rate  unknown (no arrival times)" in llmperf.stdout
    # Not "0.000 s": the span of arrivals the file does not have is unknown too.
    assert "time span     unknown (no arrival times)" in llmperf.stdout


def test_trace_format_override_and_map() -> None:
    """--trace-format settles an ambiguous file; --map feeds a renamed CSV."""
    result = runner.invoke(
        app, ["info", str(FIX / "ambiguous_bench.json"), "--trace-format", "sglang"]
    )
    assert result.exit_code == EXIT_OK, result.output
    assert "SGLang bench_serving JSONL" in result.stdout
    result = runner.invoke(
        app,
        [
            "info",
            str(FIX / "tiny_mapped.csv"),
            "--map",
            "arrival_s=ts_ms:ms",
            "--map",
            "input_tokens=prompt_len",
            "--map",
            "output_tokens=gen_len",
        ],
    )
    assert result.exit_code == EXIT_OK, result.output
    assert "time span     3 s" in result.stdout


def test_convert_round_trip(tmp_path) -> None:
    """The convert command writes canonical parquet that reads back to the same trace."""
    out = tmp_path / "sub" / "m.parquet"
    result = runner.invoke(app, ["convert", str(FIX / "tiny_bailian.jsonl"), "-o", str(out)])
    assert result.exit_code == EXIT_OK, result.output
    a, b = read_trace(FIX / "tiny_bailian.jsonl"), read_trace(out)
    assert a.table.equals(b.table) and a.notes == b.notes and b.block_tokens == 16


def test_convert_refuses_a_name_of_no_format_and_own_input(tmp_path) -> None:
    """-o must name a format (or --to must) and must not be the input."""
    one_error_line(
        runner.invoke(app, ["convert", str(FIX / "tiny_azure.csv"), "-o", str(tmp_path / "x.txt")]),
        "*.parquet, *.csv or *.jsonl",
    )
    src = tmp_path / "t.parquet"
    runner.invoke(app, ["convert", str(FIX / "tiny_azure.csv"), "-o", str(src)])
    one_error_line(
        runner.invoke(app, ["convert", str(src), "-o", str(src)]), "never writes over its input"
    )


# One test per bad-input case of the issue: exit 2, one line naming file, row and column, no
# traceback, no output file.
BAD = {
    "empty file": ("empty.jsonl", ["empty file"]),
    "truncated last line": ("truncated.jsonl", ["row 5", "column 'hash_ids'", "truncated"]),
    "truncated CSV line": ("truncated.csv", ["row 2", "column 'GeneratedTokens'"]),
    "wrong type (JSONL)": ("wrong_type.jsonl", ["row 3", "column 'input_length'", "wrong_type"]),
    "wrong type (CSV)": ("wrong_type.csv", ["row 3", "column 'input_tokens'", "'many'"]),
    "negative tokens": (
        "negative_tokens.jsonl",
        ["row 2", "column 'output_tokens'", "negative_value: -5"],
    ),
    "NaN tokens": ("nan_tokens.csv", ["row 2", "column 'input_tokens'", "nan_value"]),
    "missing column": (
        "missing_column.csv",
        [
            "column 'input_tokens'",
            "columns found: arrival_s, prompt_len, output_tokens",
            "--map input_tokens=",
        ],
    ),
    "binary file": ("binary.bin", ["binary file"]),
    "unknown format": ("unknown.txt", ["unknown trace format", "--trace-format"]),
    "unknown JSON": ("unknown.json", ["keys found: bar, foo", "--trace-format"]),
    "ambiguous": ("ambiguous_bench.json", ["--trace-format vllm"]),
    "duplicate ids": ("duplicate_ids.csv", ["row 3", "column 'request_id'", "duplicate_id"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("command", ["convert", "info"])
def test_bad_input(case, command, tmp_path) -> None:
    """Each bad input: exit 2, one line naming the file (and row/column), nothing written."""
    name, needles = BAD[case]
    out = tmp_path / "out.parquet"
    args = [command, str(FIX / name)] + (["-o", str(out)] if command == "convert" else [])
    one_error_line(runner.invoke(app, args), name, *needles)
    assert list(tmp_path.iterdir()) == []


def test_directory_is_a_user_error(tmp_path) -> None:
    """A directory without parquet files given as the trace (one with them is read whole)."""
    one_error_line(runner.invoke(app, ["info", str(tmp_path)]), "no parquet files found")


def test_millisecond_arrivals_warn_in_one_line(tmp_path) -> None:
    """Milliseconds declared as seconds (12k requests over 40 days): one warning line, exit 0."""
    path = tmp_path / "ms.csv"
    arrivals = np.linspace(0, 3_537_000, 12_000)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["arrival_s", "input_tokens", "output_tokens"])
        w.writerows([[f"{a:.0f}", 100, 10] for a in arrivals])
    out = tmp_path / "ms.parquet"
    result = runner.invoke(app, ["convert", str(path), "-o", str(out)])
    assert result.exit_code == EXIT_OK, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("warning: ")
    assert lines[1] == f"wrote {out}: canonical parquet"
    assert "ms.csv: column 'arrival_s'" in lines[0] and "--map arrival_s=<column>:ms" in lines[0]
    with pytest.warns(KvAdvisorWarning):  # reading the converted file warns again
        assert any("suspicious time unit" in n for n in read_trace(out).notes)
    fixed = runner.invoke(app, ["info", str(path), "--map", "arrival_s=arrival_s:ms"])
    assert fixed.exit_code == EXIT_OK and "warning" not in fixed.stderr
    assert "time span     59 min" in fixed.stdout  # 3,537 s = 58.95 min, 3 digits: 59.0


def test_report_output_respects_umask(tmp_path) -> None:
    """A report written by analyze -o gets the umask's mode (0644 under 022), not 0600.

    The Mooncake head with one provider's search and no closed-loop replay: the file's mode
    is the writer's, whatever the analysis put in it.
    """
    out = tmp_path / "r.json"
    head = SAMPLES / "mooncake_conversation_head.jsonl.gz"
    old = os.umask(0o022)
    try:
        result = runner.invoke(
            app, ["analyze", str(head), "--provider", "aws", "--no-replay", "-o", str(out)]
        )
    finally:
        os.umask(old)
    assert result.exit_code == EXIT_OK, result.output
    assert out.stat().st_mode & 0o777 == 0o644
