"""Golden files for every renderer on a small trace built in code (byte-stable output).

Two cases: ``small`` is the real pipeline on the trace (sections the analysis does not fill
say why), ``full`` has every section filled with fixed values. Charts are matplotlib SVG: the
HTML pages compare byte for byte under the matplotlib version that wrote the golden files
(recorded beside them); under another version only the chart bodies are masked, since
matplotlib's own drawing is not ours to freeze, and everything else still compares exactly.
"""

from __future__ import annotations

import re
import warnings

import matplotlib
import pytest
from goldtest import GOLDEN, compare_golden
from report_fixtures import analysed, full_report, small_trace

from kvadvisor.report import RENDERERS

CASES = {
    "small": lambda: analysed(small_trace()),
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
    """Two renderings of one report are byte-identical (salted ids, no dates)."""
    report = full_report()
    first = RENDERERS["html"]().render(report)
    assert first == RENDERERS["html"]().render(report)
    assert "<dc:date>" not in first and "Matplotlib v" not in first
