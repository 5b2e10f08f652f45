"""Terminal summary: fits the width, wraps between words, colours severities only when asked."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from report_fixtures import full_report

from kvadvisor.report.console import ConsoleRenderer
from kvadvisor.results.common import TraceSummary

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LONG_NAME = "aws-fsx-lustre-persistent2-125"


def _long_names():  # type: ignore[no-untyped-def]
    """The full report with a 30-character storage name in both stages' verdicts."""
    report = full_report()
    rec = report.recommendation
    stages = {s: replace(getattr(rec, s), storage=LONG_NAME) for s in ("prefill", "decode")}
    return replace(report, recommendation=replace(rec, **stages))


@pytest.mark.parametrize("width", [40, 60, 80, 100, 160])
def test_lines_fit_the_width(width: int) -> None:
    """No line is longer than the terminal (the fixture has no word longer than 40)."""
    text = ConsoleRenderer(width).render(full_report())
    assert max(len(line) for line in text.splitlines()) <= width


def test_every_word_survives_wrapping() -> None:
    """Narrow output loses no word of a finding's message."""
    narrow = ConsoleRenderer(40).render(full_report())
    for word in "Prefill writes peak at 4.8x their mean".split():
        assert word in narrow


@pytest.mark.parametrize("width", [80, 100])
def test_names_wrap_between_words_not_inside(width: int) -> None:
    """A storage name wider than a cell of the old layout stays whole (it fits on a line)."""
    text = ConsoleRenderer(width).render(_long_names())
    lines = [line for line in text.splitlines() if line.startswith("storage")]
    assert len(lines) == 1 and lines[0].count(LONG_NAME) == 2, text


def test_summary_content() -> None:
    """Verdict per stage, key numbers and findings (most severe first) are all there."""
    text = ConsoleRenderer(100).render(full_report())
    lines = text.splitlines()
    assert any(line.split()[:3] == ["instance", "p5e.48xlarge", "gn8is"] for line in lines)
    assert "76.6%" in text and "1.25 GB/s" in text and "6 GB/s" in text
    assert text.index("ST01") < text.index("CA01")  # warning before info
    assert "Findings (2)" in text


def test_colour_only_when_asked() -> None:
    """Plain text has no escape sequence; colour marks severities, headings and the headline."""
    plain = ConsoleRenderer(100).render(full_report())
    assert "\x1b" not in plain
    coloured = ConsoleRenderer(100, color=True).render(full_report())
    assert ANSI.sub("", coloured) == plain
    # warning in yellow (33), info in cyan (36), headings bold (1).
    assert "\x1b[33mwarning" in coloured and "\x1b[36minfo" in coloured
    assert "\x1b[1mVerdict" in coloured


def test_untrusted_text_cannot_style_or_control_the_terminal() -> None:
    """Rich markup and escape sequences from a trace path stay text, coloured or not."""
    report = full_report()
    hostile = "[bold red]x[/] \x1b]0;title\x07"
    trace = replace(report.trace, path=hostile)
    assert isinstance(trace, TraceSummary)
    for color in (False, True):
        text = ConsoleRenderer(100, color=color).render(replace(report, trace=trace))
        assert "[bold red]x[/]" in ANSI.sub("", text)
        assert "\x07" not in text and "\x1b]" not in text
        assert "\\x1b]0;title\\x07" in text


def test_tier_capacity_is_said_per_instance_not_per_device() -> None:
    """3.42 TiB over 2 devices is the instance's total: never "× 2", which reads per device."""
    text = ConsoleRenderer(160).render(full_report())
    assert "3.42 TiB per instance on 2 devices" in text
    assert "× 2" not in text
