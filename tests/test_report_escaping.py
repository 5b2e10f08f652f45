"""Hostile text (request ids, model names, paths holding <script> and quotes) stays text."""

from __future__ import annotations

import functools
import json
from html.parser import HTMLParser

from report_fixtures import analysed, fill_sections, small_trace

from kvadvisor.report import RENDERERS
from kvadvisor.report.jsonreport import clean
from kvadvisor.report.serieslabels import with_series_labels

HOSTILE = '<script>alert("x")</script>\'"><img src=x onerror=alert(1)>&amp;|`*_'


@functools.cache
def hostile_report():
    """A report whose trace and advice strings all carry HOSTILE."""
    trace = small_trace(
        5,
        request_prefix=HOSTILE,
        model=f"qwen{HOSTILE}",
        path=f"/traces/{HOSTILE}.jsonl",
    )
    return fill_sections(analysed(trace), text=HOSTILE)


class _Collector(HTMLParser):
    """Every start tag with its attributes, and the text inside script elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        (self.script_text if self._in_script else self.text).append(data)


def test_html_escapes_everything() -> None:
    """No tag or attribute comes from data; the text reads back exactly; the JSON block parses."""
    report = hostile_report()
    page = RENDERERS["html"]().render(report)
    parsed = _Collector()
    parsed.feed(page)
    scripts = [attrs for tag, attrs in parsed.tags if tag == "script"]
    assert scripts == [{"type": "application/json", "id": "kvadvisor-report"}]
    assert not [t for t, _ in parsed.tags if t == "img"]
    assert not [a for _, attrs in parsed.tags for a in attrs if a.startswith("on")]
    text = "".join(parsed.text)
    for shown in (f"qwen{HOSTILE}", f"/traces/{HOSTILE}.jsonl", f"p5e.48xlarge{HOSTILE}"):
        assert shown in text
    embedded = json.loads("".join(parsed.script_text))
    assert embedded == clean(with_series_labels(report.to_dict()))
    assert "</script><" not in page.split('id="kvadvisor-report">', 1)[1][:-30]


def test_markdown_escapes_html_and_table_syntax() -> None:
    """In the PR comment no raw tag survives and no cell breaks the table."""
    md = RENDERERS["markdown"]().render(hostile_report())
    assert "<script" not in md and "<img" not in md
    borders = 0
    for line in md.splitlines():
        if not line.startswith("|"):
            borders = 0
            continue
        # Unescaped pipes only as cell borders: as many as the table's header row has.
        cells = line.replace("\\|", "").count("|")
        borders = borders or cells
        assert cells == borders, line


def test_json_and_text_keep_the_strings_exactly() -> None:
    """JSON carries the hostile strings verbatim (escaping is the reader's job there)."""
    report = hostile_report()
    doc = json.loads(RENDERERS["json"]().render(report))
    assert doc["trace"]["models"] == [f"qwen{HOSTILE}"]
    assert doc["trace"]["path"] == f"/traces/{HOSTILE}.jsonl"
    assert HOSTILE in RENDERERS["text"]().render(report)
