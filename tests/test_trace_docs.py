"""Docs meta-tests: every error slug and reason code, and every trace format, is documented."""

from __future__ import annotations

import re
from pathlib import Path

from kvadvisor.errors import KvAdvisorError, TraceProblem
from kvadvisor.trace import TraceFormat

REPO = Path(__file__).resolve().parents[1]


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_error_slug_has_an_anchor() -> None:
    """docs/errors.md has <a id="slug"> for each error class in kvadvisor (the CLI links it)."""
    text = (REPO / "docs" / "errors.md").read_text()
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text))
    import kvadvisor.plan  # noqa: F401 - PlanError lives there; the CLI links its slug too

    classes = [KvAdvisorError] + [
        c for c in _subclasses(KvAdvisorError) if c.__module__.startswith("kvadvisor.")
    ]
    missing = sorted({c.slug for c in classes} - anchors)
    assert not missing, f"add sections to docs/errors.md for: {missing}"


def test_every_reason_code_is_documented() -> None:
    """Each TraceProblem code is a row of the reason-code table."""
    text = (REPO / "docs" / "errors.md").read_text()
    missing = [p.value for p in TraceProblem if f"| `{p.value}` |" not in text]
    assert not missing


def test_every_format_is_documented() -> None:
    """docs/traces.md and README.md list every --trace-format value."""
    for doc in (REPO / "docs" / "traces.md", REPO / "README.md"):
        text = doc.read_text()
        missing = [f.value for f in TraceFormat if f"| `{f.value}` |" not in text]
        assert not missing, (doc.name, missing)


def test_sample_traces_are_attributed() -> None:
    """sample_traces/README.md names every sample file and both licenses."""
    samples = REPO / "sample_traces"
    text = (samples / "README.md").read_text()
    for path in samples.iterdir():
        if path.name != "README.md":
            assert f"`{path.name}`" in text, path.name
    assert "Apache License 2.0" in text and "CC-BY 4.0" in text
