"""Numbers reach a reader through one formatter (issue 17): no inline number formats outside it.

Every number a user reads goes through :mod:`kvadvisor.units` (``format_value``, ``Quantity``
and the helpers beside them), so the same quantity reads the same in a message, an evidence
line, a table and an engine-config comment. This test walks the source of every module outside
``kvadvisor/units`` and fails on a number format written inline: an f-string format spec that
formats a number (``{x:.2f}``, ``{n:,}``, ``{r:.1%}``, ``{v:g}``), ``"%.1f" % x``,
``format(x, ".3g")`` and ``"{:.2f}".format(x)``.

A value written for a machine to read (an engine config value, a fio job option, a cache key,
a CSV cell) is not display: its line says so with a comment ``# exact: <why>``, and the test
lets it through. Width and alignment alone (``{name:<12}``) are layout, and hexadecimal
(``{ord(c):04x}``, a character's code in an escape) is a code, not a quantity.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "kvadvisor"
FORMATTER = PKG / "units"
MARK = "# exact:"

# A format spec formats a number when it has a thousands separator or a numeric type letter.
NUMERIC_SPEC = re.compile(r"[,_]|[deEfFgGn%]$")
PERCENT_FORMAT = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[dieEfFgG]")
BRACE_FORMAT = re.compile(r"\{[^{}]*:[^{}]*(?:[,_]|[deEfFgGn%])\}")


def _spec_text(spec: ast.JoinedStr) -> str:
    """The literal part of a format spec (a nested ``{width}`` counts as nothing)."""
    return "".join(v.value for v in spec.values if isinstance(v, ast.Constant))


def inline_formats(source: str) -> list[tuple[int, str]]:
    """(line, what) for each inline number format in ``source`` not marked ``# exact:``."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found: list[tuple[int, str]] = []

    def flag(node: ast.AST, what: str) -> None:
        start, end = node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno
        if not any(MARK in lines[i - 1] for i in range(start, end + 1)):
            found.append((start, what))

    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            spec = _spec_text(node.format_spec)  # type: ignore[arg-type]
            if NUMERIC_SPEC.search(spec):
                flag(node, f"f-string spec :{spec}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            left = node.left
            if isinstance(left, ast.Constant) and isinstance(left.value, str):
                if PERCENT_FORMAT.search(left.value):
                    flag(node, f"%-format {left.value!r}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "format" and len(node.args) == 2:
                spec_arg = node.args[1]
                if isinstance(spec_arg, ast.Constant) and isinstance(spec_arg.value, str):
                    if NUMERIC_SPEC.search(spec_arg.value):
                        flag(node, f"format(..., {spec_arg.value!r})")
            elif (
                isinstance(func, ast.Attribute)
                and func.attr == "format"
                and isinstance(func.value, ast.Constant)
                and isinstance(func.value.value, str)
                and BRACE_FORMAT.search(func.value.value)
            ):
                flag(node, f"str.format {func.value.value!r}")
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if FORMATTER not in p.parents)


def test_no_inline_number_formats_outside_the_formatter() -> None:
    """Every module outside kvadvisor/units formats its numbers through it."""
    offenders = []
    for path in _modules():
        for line, what in inline_formats(path.read_text(encoding="utf-8")):
            offenders.append(f"{path.relative_to(PKG.parent)}:{line}: {what}")
    assert not offenders, (
        "format these through kvadvisor.units (format_value / Quantity), or mark a value "
        f"written for a machine with '{MARK} <why>':\n" + "\n".join(offenders)
    )


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ('f"{x:.2f} GiB"', True),
        ('f"{n:,} requests"', True),
        ('f"{r:.1%}"', True),
        ('f"${p:g}/h"', True),
        ('f"{x:.{d}f}"', True),
        ('"%.1f s" % x', True),
        ('format(x, ".3g")', True),
        ('"{:,.0f} GB".format(x)', True),
        ('f"{name:<12}"', False),
        ('f"U+{ord(c):04X}"', False),
        ('f"{name}"', False),
        ('f"{x:.9g}"  # exact: a cache key, never shown', False),
        ('"%s and %r" % (a, b)', False),
    ],
)
def test_the_check_flags_inline_number_formats(source: str, flagged: bool) -> None:
    """The test for the test: each kind of inline format is caught; layout and marked ones pass."""
    assert bool(inline_formats(source)) is flagged
