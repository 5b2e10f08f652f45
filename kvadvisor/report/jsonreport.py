"""JSON renderer: the public contract of DESIGN.md, sorted keys, floats rounded in one place.

The document is ``AdviceReport.to_dict()`` with each chart series' name and axis labels added
from its key (``serieslabels``): ``format_version`` (see FORMAT_VERSION in
``kvadvisor.results.report`` for what each version changed) and the contract's top-level keys,
plus additive keys. It validates against ``schema/report.schema.json`` shipped beside this
module (:func:`schema`).
"""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import Any

from kvadvisor.report.serieslabels import with_series_labels
from kvadvisor.results.report import AdviceReport

FLOAT_DIGITS = 6


def clean(value: Any) -> Any:
    """Round floats and make NaN/inf null, recursively (JSON has no NaN)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, FLOAT_DIGITS)
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


class JsonRenderer:
    """Render the report as one JSON object."""

    name = "json"
    file_extension = ".json"

    def render(self, report: AdviceReport) -> str:
        """Return deterministic JSON text."""
        doc = with_series_labels(report.to_dict())
        return json.dumps(clean(doc), sort_keys=True, indent=2) + "\n"


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the report this renderer writes."""
    text = (
        resources.files("kvadvisor.report")
        .joinpath("schema/report.schema.json")
        .read_text(encoding="utf-8")
    )
    return dict(json.loads(text))
