"""Golden files for every renderer on a small trace built in code (byte-stable output).

Two cases: ``small`` has only what the trace gives (every other section says why it is
missing), ``full`` has every section filled with fixed values. Neither runs the engines, so
the files change only when a renderer does. Charts are matplotlib SVG: the
HTML pages compare byte for byte under the matplotlib version that wrote the golden files
(recorded beside them); under another version only the chart bodies are masked, since
matplotlib's own drawing is not ours to freeze, and everything else still compares exactly.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import replace

import matplotlib
import pytest
from goldtest import GOLDEN, compare_golden
from report_fixtures import bare_report, full_report

from kvadvisor.report import RENDERERS
from kvadvisor.report.charts import ChartSpec, Line, Mark, render_svg

CASES = {
    "small": bare_report,
    "full": full_report,
}
FILE_NAMES = {
    "text": "report.txt",
    "json": "report.json",
    "markdown": "report.md",
    "html": "report.html",
}
MPL_VERSION_FILE = GOLDEN / "matplotlib-version.txt"
SVG = re.compile(r"<svg .*?</svg>", re.S)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_golden(request: pytest.FixtureRequest, case: str, fmt: str) -> None:
    """Each renderer's output on each case equals its golden file."""
    actual = RENDERERS[fmt]().render(CASES[case]())
    name = FILE_NAMES[fmt]
    if request.config.getoption("--update-golden"):
        MPL_VERSION_FILE.parent.mkdir(parents=True, exist_ok=True)
        MPL_VERSION_FILE.write_text(matplotlib.__version__ + "\n", encoding="utf-8")
    elif fmt == "html" and MPL_VERSION_FILE.read_text().strip() != matplotlib.__version__:
        warnings.warn(
            f"matplotlib {matplotlib.__version__} differs from the golden files' "
            f"{MPL_VERSION_FILE.read_text().strip()}: chart bodies masked",
            stacklevel=1,
        )
        expected = (GOLDEN / case / name).read_text(encoding="utf-8")
        assert SVG.sub("<svg/>", actual) == SVG.sub("<svg/>", expected)
        return
    compare_golden(request, case, name, actual)


def test_charts_are_deterministic() -> None:
    """Drawing one chart twice gives identical bytes; two charts never share an element id.

    Salted ids, no date and no creator make the bytes stable.
    """
    draw = render_svg.__wrapped__  # bypass the cache: draw for real, twice
    spec = ChartSpec(
        key="a",
        title="t",
        x_title="x (s)",
        y_title="y (GB/s)",
        lines=(Line("l", (0.0, 1.0, 2.0), (1.0, 3.0, 2.0)),),
        marks=(Mark("y", 2.0, "mean"),),
    )
    first = draw(spec)
    assert first == draw(spec)
    assert "<dc:date>" not in first and "Matplotlib v" not in first
    other = draw(replace(spec, key="b"))
    ids = set(re.findall(r'id="([^"]+)"', first)) & set(re.findall(r'id="([^"]+)"', other))
    assert not ids, ids


def test_page_ids_are_unique_and_resolve() -> None:
    """Inline SVGs share one id space: no id twice, every url(#...) / href="#..." resolves."""
    page = RENDERERS["html"]().render(full_report())
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))
    refs = re.findall(r"url\(#([^)]+)\)", page) + re.findall(r'href="#([^"]+)"', page)
    assert refs and set(refs) <= set(ids)
