"""docs/api.md runs: its Python blocks in order, in one namespace, as a notebook would."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import kvadvisor

REPO = Path(__file__).resolve().parents[1]
API_DOC = REPO / "docs" / "api.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks() -> list[str]:
    """The page's Python code blocks, in order."""
    return BLOCK.findall(API_DOC.read_text(encoding="utf-8"))


def test_the_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Every block runs after the ones above it; their asserts check the values they show."""
    for name in ("sample_traces", "examples"):
        (tmp_path / name).symlink_to(REPO / name)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "api_doc"}
    code = blocks()
    assert len(code) >= 5
    for i, block in enumerate(code):
        exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
    assert (tmp_path / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert "<testsuites" in (tmp_path / "review.xml").read_text(encoding="utf-8")
    out = capsys.readouterr().out
    assert "400 requests" in out and "error: " in out


def test_every_public_name_is_documented() -> None:
    """Each name the package exports has its row in docs/api.md."""
    text = API_DOC.read_text(encoding="utf-8")
    missing = [name for name in kvadvisor.__all__ if f"`{name}" not in text]
    assert not missing, missing


def test_no_public_name_is_a_subpackage() -> None:
    """A public function named like a subpackage would be replaced by the module on its import."""
    pkg = REPO / "kvadvisor"
    clash = [n for n in kvadvisor.__all__ if (pkg / n).is_dir() or (pkg / f"{n}.py").is_file()]
    assert not clash, clash


def test_importing_kvadvisor_loads_no_analysis() -> None:
    """`import kvadvisor` (and so `kvadvisor --version`'s package) loads none of the pipeline."""
    import subprocess

    code = (
        "import sys, kvadvisor; "
        "print(sorted(m for m in sys.modules if m.startswith('kvadvisor.')), "
        "'numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # jitcache (standard library only) sets numba's cache directory before any kernel exists.
    assert out.stdout.strip() == "['kvadvisor.jitcache'] False"
