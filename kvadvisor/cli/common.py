"""Shared CLI plumbing: the app, exit codes, the one error boundary, output writing, options."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from typer.core import TyperCommand, TyperGroup

from kvadvisor import __version__
from kvadvisor.errors import ConfigError, KvAdvisorError, KvAdvisorWarning
from kvadvisor.fileio import atomic_target
from kvadvisor.trace import TraceFormat

if TYPE_CHECKING:
    from kvadvisor.trace import Trace

# --help panels, in the order a command's options are best read.
PANEL_INPUT = "Input"
PANEL_CACHE = "Cache"
PANEL_MODEL = "Model and GPU"
PANEL_DEPLOYMENT = "Deployment"
PANEL_RULES = "Rules and catalogs"
PANEL_OUTPUT = "Output"

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USER_ERROR = 2

# Parameter type -> the metavar `--help` shows (typer's own are `<list[str]>`, `<bool>`).
_METAVARS = {"int": "N", "float": "NUMBER", "str": "TEXT", "Path": "PATH"}


def readable_metavars(params: list[Any]) -> None:
    """Plain metavars for options that declare none: flags none at all, values by their type.

    Choices (enums) keep typer's list of values; a repeatable option shows its element's.
    """
    for param in params:
        if param.param_type_name == "argument":
            # An argument's name says what it is (TRACE, FILES); typer's `<path>` adds nothing.
            if param.bare_type().removeprefix("list[").removesuffix("]") in _METAVARS:
                param.display_type_rich = lambda ctx: None
            continue
        if param.metavar is not None:
            continue
        if param.is_flag:
            param.metavar = ""
            continue
        bare = param.bare_type()
        element = bare[len("list[") : -1] if bare.startswith("list[") else bare
        if element in _METAVARS:
            param.metavar = _METAVARS[element]
        elif bare.startswith("list["):
            # A repeatable choice: its values, as a single choice shows them.
            shown = param.display_type(None)
            if shown and shown.startswith("<list[") and shown.endswith("]>"):
                param.metavar = "<" + shown[len("<list[") : -len("]>")] + ">"


class Command(TyperCommand):
    """A command whose --help shows readable metavars (every command gets it: cli.commands)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        readable_metavars(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        """Typer's --help, without the `<bool>` typer shows for it."""
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


class Group(TyperGroup):
    """A command group with the same readable --help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        readable_metavars(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        """Typer's --help, without the `<bool>` typer shows for it."""
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


def readable_help(typer_app: typer.Typer) -> None:
    """Give every command and group of ``typer_app`` (recursively) the readable --help."""
    for info in typer_app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = Command
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            if group.typer_instance.info.cls in (None, TyperGroup):
                group.typer_instance.info.cls = Group
            readable_help(group.typer_instance)


app = typer.Typer(
    cls=Group,
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
        # The reference resolves for a pip install too: the docs ship in the package.
        typer.echo(f"error: {exc} (see `kvadvisor docs errors#{exc.slug}`)", err=True)
        raise typer.Exit(EXIT_USER_ERROR) from None


def write_output(target: str, text: str) -> None:
    """Write ``text`` to a file atomically (temp file + rename), or to stdout for '-'.

    A file written is said on stderr ("wrote PATH"), so a quiet run still tells where its
    output went and stdout keeps only what was asked for.
    """
    if target == "-":
        sys.stdout.write(text)
        return
    path = Path(target)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give an output file name")
    with atomic_target(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    said_written(path)


def said_written(path: Path | str, what: str = "") -> None:
    """One "wrote PATH" line on stderr (``what`` adds a short description after a colon)."""
    typer.echo(f"wrote {path}" + (f": {what}" if what else ""), err=True)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"kvadvisor {__version__}")
        raise typer.Exit(EXIT_OK)


TraceArg = Annotated[
    Path,
    typer.Argument(
        metavar="TRACE",
        help="Request trace (any supported format), or a directory of canonical parquet.",
        show_default=False,
    ),
]
TraceFormatOpt = Annotated[
    TraceFormat | None,
    typer.Option(
        "--trace-format",
        help="Trace format, when auto-detection cannot tell.",
        case_sensitive=False,
        rich_help_panel=PANEL_INPUT,
    ),
]
MapOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--map",
        metavar="CANONICAL=SOURCE[:UNIT]",
        help="Canonical CSV/parquet: take a canonical column from a source column "
        "(repeatable), e.g. --map input_tokens=prompt_len --map arrival_s=ts:ms.",
        rich_help_panel=PANEL_INPUT,
    ),
]
BlockTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--block-tokens",
        min=1,
        metavar="N",
        help="Tokens per hash block (overrides the format's).",
        rich_help_panel=PANEL_INPUT,
    ),
]


def read_with_options(
    trace: Path,
    trace_format: TraceFormat | None,
    maps: list[str] | None,
    block_tokens: int | None,
) -> Trace:
    """Read a trace (a file, or a directory of parquet as `analyze` takes) with the shared options.

    Through the trace package, not ``kvadvisor.read_trace``: the public API module also
    loads the analysis and the renderers, which `info` and `convert` never use.
    """
    from kvadvisor.trace import read_trace_path

    return read_trace_path(trace, trace_format, column_map=maps, block_tokens=block_tokens)


WarmupOpt = Annotated[
    float,
    typer.Option(
        metavar="FRACTION",
        help="Share of requests treated as cache warm-up.",
        min=0.0,
        max=0.99,
        rich_help_panel=PANEL_CACHE,
    ),
]
RulesDirOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--rules",
        metavar="DIR",
        help="Directory of extra rule files (repeatable).",
        file_okay=False,
        rich_help_panel=PANEL_RULES,
    ),
]
SelectOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--select",
        metavar="RULE",
        help="Only rules with this code, name or group (repeatable, or a,b).",
        rich_help_panel=PANEL_RULES,
    ),
]
IgnoreOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ignore",
        metavar="RULE",
        help="Skip rules with this code, name or group (repeatable).",
        rich_help_panel=PANEL_RULES,
    ),
]
CatalogOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--catalog",
        metavar="FILE",
        help="Catalog file adding or overriding entries (repeatable).",
        dir_okay=False,
        rich_help_panel=PANEL_RULES,
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
