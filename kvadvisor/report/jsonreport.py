"""JSON renderer: the public contract of DESIGN.md, sorted keys, floats rounded in one place."""

from __future__ import annotations

import json
import math
from typing import Any

from kvadvisor.advise.model import AdviceReport

FLOAT_DIGITS = 6


def _clean(value: Any) -> Any:
    """Round floats and make NaN/inf null, recursively (JSON has no NaN)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, FLOAT_DIGITS)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class JsonRenderer:
    """Render the report as one JSON object."""

    name = "json"
    file_extension = ".json"

    def render(self, report: AdviceReport) -> str:
        """Return deterministic JSON text."""
        return json.dumps(_clean(report.to_dict()), sort_keys=True, indent=2) + "\n"
