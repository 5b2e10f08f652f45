"""Shared CLI plumbing: the app, exit codes, the one error boundary, output writing, options."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from kvadvisor import __version__
from kvadvisor.errors import ConfigError, KvAdvisorError, KvAdvisorWarning
from kvadvisor.fileio import atomic_target
from kvadvisor.trace import TraceFormat

if TYPE_CHECKING:
    from kvadvisor.trace import Trace

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USER_ERROR = 2

app = typer.Typer(
    name="kvadvisor",
    help="Profile LLM-serving traffic and advise KV-cache storage per stage (prefill / decode).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@contextmanager
def handle_user_errors() -> Iterator[None]:
    """The one boundary: a KvAdvisorError becomes one line on stderr and exit 2.

    A KvAdvisorWarning raised meanwhile is shown as one ``warning:`` line on stderr; other
    warnings keep Python's default display.
    """
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, KvAdvisorWarning):
            typer.echo(f"warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    try:
        # catch_warnings restores the filters and showwarning when the command ends.
        with warnings.catch_warnings():
            warnings.simplefilter("always", KvAdvisorWarning)
            warnings.showwarning = show
            yield
    except KvAdvisorError as exc:
        typer.echo(f"error: {exc} (see docs/errors.md#{exc.slug})", err=True)
        raise typer.Exit(EXIT_USER_ERROR) from None


def write_output(target: str, text: str) -> None:
    """Write ``text`` to a file atomically (temp file + rename), or to stdout for '-'."""
    if target == "-":
        sys.stdout.write(text)
        return
    path = Path(target)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give an output file name")
    with atomic_target(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"kvadvisor {__version__}")
        raise typer.Exit(EXIT_OK)


TraceArg = Annotated[
    Path, typer.Argument(help="Request trace (any supported format).", show_default=False)
]
TraceFormatOpt = Annotated[
    TraceFormat | None,
    typer.Option(
        "--trace-format",
        help="Trace format, when auto-detection cannot tell.",
        case_sensitive=False,
    ),
]
MapOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--map",
        metavar="CANONICAL=SOURCE[:UNIT]",
        help="Canonical CSV/parquet: take a canonical column from a source column "
        "(repeatable), e.g. --map input_tokens=prompt_len --map arrival_s=ts:ms.",
    ),
]
BlockTokensOpt = Annotated[
    int | None,
    typer.Option("--block-tokens", min=1, help="Tokens per hash block (overrides the format's)."),
]


def read_with_options(
    trace: Path,
    trace_format: TraceFormat | None,
    maps: list[str] | None,
    block_tokens: int | None,
) -> Trace:
    """Read a trace with the trace options every command shares.

    Through the trace package's reader, not ``kvadvisor.read_trace``: the same function, but
    the public API module also loads the analysis and the renderers, which `info` and
    `convert` never use.
    """
    from kvadvisor.trace import read_trace

    return read_trace(trace, trace_format, column_map=maps, block_tokens=block_tokens)


WarmupOpt = Annotated[
    float, typer.Option(help="Share of requests treated as cache warm-up.", min=0.0, max=0.99)
]
RulesDirOpt = Annotated[
    list[Path] | None,
    typer.Option("--rules", help="Directory of extra rule files (repeatable).", file_okay=False),
]
SelectOpt = Annotated[
    list[str] | None,
    typer.Option("--select", help="Only rules with this code, name or group (repeatable, or a,b)."),
]
IgnoreOpt = Annotated[
    list[str] | None,
    typer.Option("--ignore", help="Skip rules with this code, name or group (repeatable)."),
]
CatalogOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--catalog", help="Catalog file adding or overriding entries (repeatable).", dir_okay=False
    ),
]


def as_strs(values: list | None) -> tuple[str, ...]:
    """Repeatable option values (paths or text) as a tuple of strings; None is empty."""
    return tuple(str(v) for v in values or ())


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Show version."),
    ] = False,
) -> None:
    """kvadvisor: measure first, then configure."""
