"""Every renderer on an empty (zero-request) and a one-request report (pyinstrument's idiom)."""

from __future__ import annotations

import re

import pytest
from report_fixtures import analysed_small, fill_sections

from kvadvisor.report import RENDERERS
from kvadvisor.report.registry import FORMATS

SECTIONS = (
    "verdict",
    "workload",
    "stages",
    "prefix",
    "io",
    "findings",
    "rules",
    "alternatives",
    "method",
    "inputs",
)


@pytest.mark.parametrize("requests", [0, 1])
@pytest.mark.parametrize("filled", [False, True])
@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_renderer_smoke(fmt: str, requests: int, filled: bool) -> None:
    """Renders without error; missing sections say why instead of inventing numbers."""
    report = analysed_small(requests)
    if filled:
        report = fill_sections(report)
    text = RENDERERS[fmt]().render(report)
    assert text.endswith("\n")
    if fmt == "html":
        # Every section is there, filled or saying why not; the evidence closed.
        for section in SECTIONS:
            assert re.search(f'<section id="{section}"( class="closed")?>', text), section
    if requests == 0 and fmt == "html":
        assert "not measured: the trace has no requests" in text


def test_registry_extensions_match_the_renderers() -> None:
    """The registry's light table names each renderer's own extension (classes load lazily)."""
    for name, (ext, _, _) in FORMATS.items():
        assert RENDERERS[name].file_extension == ext
        assert RENDERERS[name].name == name
