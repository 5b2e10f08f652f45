"""Golden-file comparison (coverage.py's goldtest idiom, with a pytest flag instead of a Makefile).

``compare_golden(request, case, name, actual)`` compares ``actual`` byte for byte with
``tests/golden/<case>/<name>``. On a mismatch it writes ``tests/golden_actual/<case>/<name>``
(git-ignored) and fails with a unified diff; ``pytest --update-golden`` rewrites the golden file.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
ACTUAL = Path(__file__).resolve().parent / "golden_actual"
MAX_DIFF_LINES = 80


def compare_golden(request: pytest.FixtureRequest, case: str, name: str, actual: str) -> None:
    """Fail with a diff unless ``actual`` equals the golden file exactly."""
    golden = GOLDEN / case / name
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(actual.encode("utf-8"))
        return
    expected = golden.read_bytes().decode("utf-8") if golden.exists() else None
    if expected == actual:
        return
    out = ACTUAL / case / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(actual.encode("utf-8"))
    if expected is None:
        pytest.fail(f"no golden file {golden}; run pytest --update-golden (actual: {out})")
    diff = list(
        difflib.unified_diff(
            expected.splitlines(), actual.splitlines(), str(golden), str(out), lineterm=""
        )
    )
    shown = "\n".join(diff[:MAX_DIFF_LINES])
    extra = len(diff) - MAX_DIFF_LINES
    more = f"\n... {extra} more diff lines" if extra > 0 else ""
    pytest.fail(f"{golden} differs from the output (saved to {out}):\n{shown}{more}")
