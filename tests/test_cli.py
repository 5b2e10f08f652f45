"""CLI: exit codes, one-line user errors, end-to-end runs on the real traces."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvadvisor import __version__
from kvadvisor.cli import EXIT_USER_ERROR, app

runner = CliRunner()


def test_version() -> None:
    """--version prints the package version."""
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_missing_file_is_user_error(tmp_path) -> None:
    """A missing trace is one line, exit 2, no traceback."""
    result = runner.invoke(app, ["analyze", str(tmp_path / "nope.jsonl")])
    assert result.exit_code == EXIT_USER_ERROR
    assert "Traceback" not in result.output
    assert "no such file" in result.output


def test_analyze_json_on_mooncake(mooncake_path, tmp_path) -> None:
    """analyze writes the JSON contract's trace block with the trace's true size."""
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["analyze", str(mooncake_path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["format_version"] == 1
    assert doc["trace"]["requests"] == 12031
    assert doc["trace"]["block_tokens"] == 512
    assert abs(doc["trace"]["duration_s"] - 3536.999) < 1e-6
