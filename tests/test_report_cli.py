"""analyze's report options: -o (repeatable), --format, '-', --quiet, the terminal summary."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvadvisor.cli import EXIT_USER_ERROR, app

runner = CliRunner()
REQUESTS = 60


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Mooncake-format JSONL written in code (the CLI's options are what is tested)."""
    path = tmp_path_factory.mktemp("trace") / "small.jsonl"
    lines = []
    for i in range(REQUESTS):
        tokens = 700 + 113 * (i % 9)
        blocks = -(-tokens // 512)
        hashes = ([1, 2] if i % 2 else [500 + i, 501 + i])[:blocks]
        hashes += [10_000 + 10 * i + k for k in range(blocks - len(hashes))]
        lines.append(
            json.dumps(
                {
                    "timestamp": i * 400,
                    "input_length": tokens,
                    "output_length": 20 + i % 7,
                    "hash_ids": hashes,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_several_outputs_at_once(trace_file: Path, tmp_path: Path) -> None:
    """One run writes HTML, JSON and Markdown, each format from its extension, plus the summary."""
    outs = [tmp_path / "r.html", tmp_path / "sub" / "r.json", tmp_path / "r.md"]
    args = ["analyze", str(trace_file)] + [a for o in outs for a in ("-o", str(o))]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert outs[0].read_text().startswith("<!DOCTYPE html>")
    doc = json.loads(outs[1].read_text())
    assert doc["trace"]["requests"] == REQUESTS
    assert doc["trace"]["sha256"] == hashlib.sha256(trace_file.read_bytes()).hexdigest()
    assert outs[2].read_text().startswith("## kvadvisor:")
    assert "Key numbers" in result.stdout
    assert not list(tmp_path.glob(".*.tmp")), "temporary files left behind"


def test_stdout_report_moves_the_summary_to_stderr(trace_file: Path) -> None:
    """--format json with no -o writes JSON alone on stdout; the summary goes to stderr."""
    result = runner.invoke(app, ["analyze", str(trace_file), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["format_version"] == 2
    assert "Key numbers" in result.stderr


def test_quiet_silences_the_summary(trace_file: Path, tmp_path: Path) -> None:
    """--quiet: a report file, no summary; only the line saying where the report went."""
    out = tmp_path / "r.md"
    result = runner.invoke(app, ["analyze", str(trace_file), "-o", str(out), "--quiet"])
    assert result.exit_code == 0
    assert result.stdout == "" and result.stderr == f"wrote {out}\n"
    assert out.exists()


def test_stdout_alone_is_json(trace_file: Path) -> None:
    """-o - without --format: the JSON report on stdout, the summary on stderr."""
    result = runner.invoke(app, ["analyze", str(trace_file), "-o", "-"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["format_version"] >= 1
    assert "Verdict" in result.stderr and "wrote" not in result.stderr


def test_format_errors_are_one_line(trace_file: Path, tmp_path: Path) -> None:
    """Unknown extension and a contradiction: exit 2, one line, no file."""
    # Each case names the message it must end with, so an unrelated exit-2 error cannot pass.
    for args, expected in (
        (["-o", str(tmp_path / "r.pdf")], "cannot tell the report format for '"),
        (
            ["--format", "json", "-o", str(tmp_path / "r.html")],
            "--format json contradicts the output file",
        ),
    ):
        result = runner.invoke(app, ["analyze", str(trace_file), *args])
        assert result.exit_code == EXIT_USER_ERROR, (args, result.output)
        assert "Traceback" not in result.output
        assert len(result.stderr.strip().splitlines()) == 1
        assert expected in result.stderr, (args, result.stderr)
    assert list(tmp_path.iterdir()) == []


def test_format_overrides_an_unknown_extension(trace_file: Path, tmp_path: Path) -> None:
    """--format names the format when the file name cannot."""
    out = tmp_path / "report.out"
    result = runner.invoke(
        app, ["analyze", str(trace_file), "--format", "markdown", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("## kvadvisor:")
