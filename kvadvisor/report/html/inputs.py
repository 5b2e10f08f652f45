"""Provenance rows: what was read, with which options and versions, by which kvadvisor."""

from __future__ import annotations

from typing import Any

from kvadvisor.report import fmt
from kvadvisor.results.report import AdviceReport


def _option_text(name: str, value: Any) -> str:
    if value is None:
        return "not set (default)"
    if isinstance(value, (list, tuple, dict)) and not value:
        return "none"
    return fmt.plain(value)


def inputs_rows(report: AdviceReport) -> tuple[tuple[str, str], ...]:
    """Provenance: what was read, with which options and data versions, by which kvadvisor."""
    t = report.trace
    rows = [
        ("trace", t.path),
        ("trace format", t.format),
        ("trace sha256", t.sha256 or "not recorded"),
        ("columns", ", ".join(t.columns) or "none"),
        ("kvadvisor version", report.meta.kvadvisor_version),
        ("report format version", str(report.meta.format_version)),
        ("generated at", report.meta.generated_at),
    ]
    rows += [(f"option {k}", _option_text(k, v)) for k, v in sorted(report.options.items())]
    rows += [(f"{k} version", v) for k, v in sorted(report.versions.items())]
    if not report.versions:
        rows.append(("catalog and rule versions", "not recorded: the advisor did not run"))
    return tuple(rows)
