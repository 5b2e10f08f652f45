"""Series words come from the key: every key has them, and the JSON contract still carries them."""

from __future__ import annotations

import json

from report_fixtures import full_report

from kvadvisor.report import RENDERERS
from kvadvisor.report.serieslabels import labels_for, series_labels, with_series_labels
from kvadvisor.results.series import Series, SeriesKey, SeriesKind


def test_every_key_has_a_caption_and_axis_labels() -> None:
    """A new SeriesKey without words fails here, not in a renderer."""
    for key in SeriesKey:
        words = labels_for(key, 60)
        assert words.name and words.x_label and words.y_label and words.legend
        assert "{" not in words.name


def test_the_arrivals_caption_names_its_window() -> None:
    """The caption is made from the series' window, not stored with it."""
    s = Series(
        "s",
        "requests/s",
        (0.0, 15.0),
        (2.0, 1.0),
        SeriesKind.STEP,
        window_s=15,
        key=SeriesKey.ARRIVALS,
    )
    assert series_labels(s).name == "arrivals per 15 s window"
    assert labels_for(SeriesKey.HIT_RATIO_STEADY).legend == "steady state"


def test_json_series_carry_the_words_of_their_key() -> None:
    """Each series in the JSON report has the name and axis labels its key's words give."""
    report = full_report()
    doc = json.loads(RENDERERS["json"]().render(report))
    found = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            if value.get("key") in {k.value for k in SeriesKey} and "x" in value:
                found.append(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(doc)
    assert len(found) >= 3
    for s in found:
        words = labels_for(SeriesKey(s["key"]), s.get("window_s"))
        assert (s["name"], s["x_label"], s["y_label"]) == (words.name, words.x_label, words.y_label)
    # Only series dicts are labelled; the model's own plain form has no words.
    plain = report.to_dict()
    assert with_series_labels({"key": "arrivals", "x": []}) == {"key": "arrivals", "x": []}
    assert "name" not in plain["io"]["series"][0]
