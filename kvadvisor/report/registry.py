"""The renderer registry: pick a renderer by name or by output file extension.

Renderer classes load on first use: the CLI checks its -o and --format options before it reads
the trace, and that check imports no renderer (nor jinja2 or the result models behind them).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kvadvisor.errors import ConfigError

if TYPE_CHECKING:
    from kvadvisor.results.report import AdviceReport


class Renderer(Protocol):
    """Turns a report into text."""

    name: str
    file_extension: str

    def render(self, report: AdviceReport) -> str:
        """Return the report as text."""
        ...


# Format name -> (its file extension, the module and class that render it). A test checks
# each extension against the class's own ``file_extension``.
FORMATS: dict[str, tuple[str, str, str]] = {
    "text": (".txt", "kvadvisor.report.console", "ConsoleRenderer"),
    "json": (".json", "kvadvisor.report.jsonreport", "JsonRenderer"),
    "markdown": (".md", "kvadvisor.report.markdown", "MarkdownRenderer"),
    "html": (".html", "kvadvisor.report.html", "HtmlRenderer"),
}


class _Renderers(Mapping[str, type]):
    """Format name -> renderer class, each class imported when first looked up."""

    def __getitem__(self, name: str) -> type:
        _, module, cls = FORMATS[name]
        return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[str]:
        return iter(FORMATS)

    def __len__(self) -> int:
        return len(FORMATS)


RENDERERS: Mapping[str, type] = _Renderers()
# Extra file extensions accepted for a format (the renderer's own comes first).
EXTRA_EXTENSIONS = {".htm": "html", ".markdown": "markdown", ".text": "text"}


def format_for(output: str | None) -> str | None:
    """The format an output file's extension names, or None ('-', no or unknown extension)."""
    if not output or output == "-":
        return None
    suffix = Path(output).suffix.lower()
    by_ext = {ext: key for key, (ext, _, _) in FORMATS.items()} | EXTRA_EXTENSIONS
    return by_ext.get(suffix)


def get_renderer(name: str | None, output: str | None) -> Renderer:
    """Renderer by explicit name, else guessed from the output file's extension.

    A name that contradicts a known extension (``--format json -o report.html``) is an error
    rather than a silent choice (pyinstrument's MisconfigurationError idiom).
    """
    if name is not None and name not in FORMATS:
        raise ConfigError(f"unknown format '{name}': choose one of {', '.join(FORMATS)}")
    guessed = format_for(output)
    if name is None:
        if guessed is None:
            known = ", ".join(ext for ext, _, _ in FORMATS.values())
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
