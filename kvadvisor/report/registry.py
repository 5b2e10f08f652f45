"""The renderer registry: pick a renderer by name or by output file extension."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from kvadvisor.errors import ConfigError
from kvadvisor.report.console import ConsoleRenderer
from kvadvisor.report.html import HtmlRenderer
from kvadvisor.report.jsonreport import JsonRenderer
from kvadvisor.report.markdown import MarkdownRenderer
from kvadvisor.results.report import AdviceReport


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
    "markdown": MarkdownRenderer,
    "html": HtmlRenderer,
}
# Extra file extensions accepted for a format (the renderer's own comes first).
EXTRA_EXTENSIONS = {".htm": "html", ".markdown": "markdown", ".text": "text"}


def format_for(output: str | None) -> str | None:
    """The format an output file's extension names, or None ('-', no or unknown extension)."""
    if not output or output == "-":
        return None
    suffix = Path(output).suffix.lower()
    by_ext = {cls.file_extension: key for key, cls in RENDERERS.items()} | EXTRA_EXTENSIONS
    return by_ext.get(suffix)


def get_renderer(name: str | None, output: str | None) -> Renderer:
    """Renderer by explicit name, else guessed from the output file's extension.

    A name that contradicts a known extension (``--format json -o report.html``) is an error
    rather than a silent choice (pyinstrument's MisconfigurationError idiom).
    """
    if name is not None and name not in RENDERERS:
        raise ConfigError(f"unknown format '{name}': choose one of {', '.join(RENDERERS)}")
    guessed = format_for(output)
    if name is None:
        if guessed is None:
            known = ", ".join(cls.file_extension for cls in RENDERERS.values())
            what = "stdout ('-')" if output == "-" else f"'{output}'"
            raise ConfigError(
                f"cannot tell the report format for {what}: name the file with one of {known} "
                "or give --format"
            )
        name = guessed
    elif guessed is not None and guessed != name:
        raise ConfigError(
            f"--format {name} contradicts the output file '{output}', which names {guessed}: "
            "drop --format or change the file name"
        )
    return RENDERERS[name]()
