"""Terminal summary: fits the width, shows the verdict and findings, wraps rather than cuts."""

from __future__ import annotations

import pytest
from report_fixtures import full_report

from kvadvisor.report.console import ConsoleRenderer, table


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


def test_summary_content() -> None:
    """Verdict per stage, key numbers and findings (most severe first) are all there."""
    text = ConsoleRenderer(100).render(full_report())
    lines = text.splitlines()
    assert any(line.split()[:3] == ["instance", "p5e.48xlarge", "gn8is"] for line in lines)
    assert "76.6%" in text and "1.25 GB/s" in text and "6 GB/s" in text
    assert text.index("ST01") < text.index("CA01")  # warning before info
    assert "Findings (2)" in text


def test_table_wraps_last_column() -> None:
    """A long last cell wraps under its column; leading columns keep their width."""
    lines = table(["a", "b"], [["x", "one two three four five six"]], 20)
    assert lines[0].startswith("a") and lines[1].startswith("-")
    assert all(len(line) <= 20 for line in lines)
    assert " ".join(line[3:].strip() for line in lines[2:]) == "one two three four five six"
