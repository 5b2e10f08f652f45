"""The code keeps the style pyproject.toml's [tool.ruff] declares (ruff is a test dependency)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    """`ruff check` over the package, the tests and the benchmarks reports no problem."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "kvadvisor", "tests", "benchmarks"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_everything_as_it_is() -> None:
    """`ruff format --check` would rewrite nothing: one layout for every file, no format churn."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "--check",
            "--no-cache",
            "kvadvisor",
            "tests",
            "benchmarks",
            "sample_traces",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
