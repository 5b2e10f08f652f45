"""The replay in named phases: no long function in fleet/, no block written twice (issue 29)."""

from __future__ import annotations

import ast
from pathlib import Path

FLEET = Path(__file__).resolve().parents[1] / "kvadvisor" / "fleet"
KERNEL = sorted(FLEET.glob("kernel*.py"))
MAX_LINES = 120
BLOCK = 6


def long_functions(paths: list[Path], limit: int) -> list[str]:
    """Functions longer than ``limit`` lines, decorators and docstring included."""
    long = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno is not None and node.end_lineno - start + 1 > limit:
                    long.append(f"{path.name}:{node.name} ({node.end_lineno - start + 1} lines)")
    return long


def code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, stripped text) of the lines that carry code (no blanks, comments, brackets)."""
    out = []
    for i, raw in enumerate(path.read_text().splitlines(), 1):
        text = raw.strip()
        if text and not text.startswith("#") and text not in {")", "(", "],", "):", "]"}:
            out.append((i, text))
    return out


def repeated_blocks(paths: list[Path], block: int) -> list[str]:
    """Runs of ``block`` code lines that appear a second time (imports aside)."""
    seen: dict[tuple[str, ...], str] = {}
    twice = []
    for path in paths:
        lines = code_lines(path)
        for j in range(len(lines) - block + 1):
            window = tuple(text for _, text in lines[j : j + block])
            where = f"{path.name}:{lines[j][0]}"
            if window in seen and not all(t.startswith(("from ", "import ")) for t in window):
                twice.append(f"{where} repeats {seen[window]}")
            seen.setdefault(window, where)
    return twice


def test_kernel_modules_found() -> None:
    """The globs see the replay's modules (an empty list would pass everything below)."""
    assert {p.name for p in KERNEL} >= {"kernel.py"}
    assert {p.name for p in FLEET.glob("*.py")} >= {"kernel.py", "engine.py"}


def test_no_function_over_120_lines_in_fleet() -> None:
    """Every function of kvadvisor/fleet is at most 120 lines (simulate_group was 912)."""
    assert not long_functions(sorted(FLEET.glob("*.py")), MAX_LINES)


def test_no_block_of_six_lines_written_twice_in_the_kernel() -> None:
    """No run of six code lines appears twice in fleet/kernel* (the completion block was)."""
    assert not repeated_blocks(KERNEL, BLOCK)


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    """A long function and a block written twice, built here, are both reported."""
    body = "\n".join(f"    x{i} = {i}" for i in range(130))
    long = tmp_path / "long.py"
    long.write_text(f"def f():\n{body}\n")
    assert long_functions([long], MAX_LINES) == ["long.py:f (131 lines)"]
    block = "".join(f"    y{i} = x + {i}\n" for i in range(BLOCK))
    twice = tmp_path / "twice.py"
    twice.write_text(f"def a(x):\n{block}\n\ndef b(x):\n{block}")
    assert len(repeated_blocks([twice], BLOCK)) == 1
