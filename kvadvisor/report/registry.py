"""The renderer registry: pick a renderer by name or by output file extension."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from kvadvisor.advise.model import AdviceReport
from kvadvisor.errors import ConfigError
from kvadvisor.report.console import ConsoleRenderer
from kvadvisor.report.jsonreport import JsonRenderer


class Renderer(Protocol):
    """Turns a report into text."""

    name: str
    file_extension: str

    def render(self, report: AdviceReport) -> str:
        """Return the report as text."""
        ...


RENDERERS: dict[str, type] = {
    "text": ConsoleRenderer,
    "json": JsonRenderer,
}


def get_renderer(name: str | None, output: str | None) -> Renderer:
    """Renderer by explicit name, else guessed from the output file's extension."""
    if name is None:
        suffix = Path(output).suffix.lower() if output and output != "-" else ""
        by_ext = {cls.file_extension: key for key, cls in RENDERERS.items()}
        if suffix not in by_ext:
            known = ", ".join(sorted(e for e in by_ext if e))
            raise ConfigError(
                f"cannot tell the report format from '{output}': use one of {known} "
                "or give --format"
            )
        name = by_ext[suffix]
    if name not in RENDERERS:
        raise ConfigError(f"unknown format '{name}': choose one of {', '.join(RENDERERS)}")
    return RENDERERS[name]()
