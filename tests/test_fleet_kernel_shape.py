"""The replay kernel stays in named phases: no long function, no block written twice (issue 29)."""

from __future__ import annotations

import ast
from pathlib import Path

KERNEL = sorted((Path(__file__).resolve().parents[1] / "kvadvisor" / "fleet").glob("kernel*.py"))
MAX_LINES = 120
BLOCK = 6


def test_kernel_modules_found() -> None:
    """The glob sees the kernel's modules (an empty list would pass everything below)."""
    assert {p.name for p in KERNEL} >= {"kernel.py", "kernel_state.py"}


def test_no_function_over_120_lines() -> None:
    """Every function of fleet/kernel* is at most 120 lines, decorators and docstring included."""
    long = []
    for path in KERNEL:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno is not None and node.end_lineno - start + 1 > MAX_LINES:
                    long.append(f"{path.name}:{node.name} ({node.end_lineno - start + 1} lines)")
    assert not long, long


def code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, stripped text) of the lines that carry code (no blanks, comments, brackets)."""
    out = []
    for i, raw in enumerate(path.read_text().splitlines(), 1):
        text = raw.strip()
        if text and not text.startswith("#") and text not in {")", "(", "],", "):", "]"}:
            out.append((i, text))
    return out


def test_no_block_of_six_lines_written_twice() -> None:
    """No run of six code lines appears twice in fleet/kernel* (the completion block was)."""
    seen: dict[tuple[str, ...], str] = {}
    twice = []
    for path in KERNEL:
        lines = code_lines(path)
        for j in range(len(lines) - BLOCK + 1):
            window = tuple(text for _, text in lines[j : j + BLOCK])
            where = f"{path.name}:{lines[j][0]}"
            if window in seen and not all(t.startswith(("from ", "import ")) for t in window):
                twice.append(f"{where} repeats {seen[window]}")
            seen.setdefault(window, where)
    assert not twice, twice
