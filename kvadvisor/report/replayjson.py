"""The replay document as JSON: sorted keys, floats rounded as the analyze report's are.

``ReplayReport.to_dict()``: ``format_version`` (REPLAY_FORMAT_VERSION in
``kvadvisor.results.replay`` lists what each version changed), provenance, the trace, and the
``replay`` section that the analyze report's contract carries too. It validates against
``schema/replay.schema.json`` (:func:`replay_schema`).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from kvadvisor.report.jsonreport import clean
from kvadvisor.results.replay import ReplayReport


class ReplayJsonRenderer:
    """Render a replay document as one JSON object."""

    name = "json"
    file_extension = ".json"

    def render(self, report: ReplayReport) -> str:
        """Return deterministic JSON text."""
        return json.dumps(clean(report.to_dict()), sort_keys=True, indent=2) + "\n"


def replay_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the replay document."""
    text = (
        resources.files("kvadvisor.report")
        .joinpath("schema/replay.schema.json")
        .read_text(encoding="utf-8")
    )
    return dict(json.loads(text))
