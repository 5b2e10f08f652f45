"""Shared CLI plumbing: the app, exit codes, the one error boundary, inputs, outputs, options."""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TextIO, TypedDict

import typer
from typer.core import TyperCommand, TyperGroup

from kvadvisor import TraceFormat, __version__
from kvadvisor.errors import (
    CatalogError,
    ConfigError,
    DocumentError,
    KvAdvisorError,
    KvAdvisorWarning,
    PlanError,
    RuleSyntaxError,
    TraceFormatError,
)
from kvadvisor.io.fileio import InputFile, InputSet, check_input, is_uri, write_text
from kvadvisor.termtext import printable
from kvadvisor.units.format import count, number

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USER_ERROR = 2

# Upper bounds of the count and size options: far above any real deployment, low enough that
# no value within them makes a run allocate or loop without end (`kvadvisor docs errors#config`).
MAX_TP = 1024  # GPUs in one tensor-parallel group
MAX_INSTANCES = 1_000_000  # model instances serving a trace
MAX_CACHE_INSTANCES = 1024  # per-instance caches replayed one by one in the routing comparison
MAX_BLOCK_TOKENS = 1 << 20  # tokens per hash block or engine chunk
MAX_WINDOW_S = 1e7  # about 116 days: one window longer than any trace it would average

# --help panels, in the order a command's options are best read.
PANEL_INPUT = "Input"
PANEL_CACHE = "Cache"
PANEL_MODEL = "Model and GPU"
PANEL_DEPLOYMENT = "Deployment"
PANEL_RULES = "Rules and catalogs"
PANEL_OUTPUT = "Output"
PANEL_TRUST = "Trust"

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


class _ReadableHelp:
    """Readable metavars and a bare --help, for commands and groups alike."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        readable_metavars(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        """Typer's --help, without the `<bool>` typer shows for it."""
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option


class Command(_ReadableHelp, TyperCommand):
    """A command whose --help shows readable metavars (every command gets it: cli.commands)."""


class Group(_ReadableHelp, TyperGroup):
    """A command group with the same readable --help."""


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
            error_line(f"warning: {message}")
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
        hint = f"(see `kvadvisor docs errors#{exc.slug}`)"
        problems = exc.problems if isinstance(exc, DocumentError) else ()
        if len(problems) > 1:
            # A plan, rule or catalog file: every problem on its own line, fixed in one pass.
            for problem in problems:
                error_line(f"error: {problem}")
            error_line(f"error: {count(len(problems))} problems {hint}")
        else:
            error_line(f"error: {exc} {hint}")
        raise typer.Exit(EXIT_USER_ERROR) from None


def error_line(text: str) -> None:
    """One line on stderr: control characters (from file names, trace or YAML text) escaped."""
    try:
        sys.stderr.write(printable(text, one_line=True) + "\n")
        sys.stderr.flush()
    except OSError:
        pass  # stderr itself is gone: the exit code is all that is left to say it


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Write text meant for a terminal, control characters escaped (stdout, or stderr).

    A stdout that cannot take it (a full device, a closed pipe) is a ConfigError, exit 2.
    """
    stream = sys.stderr if err else sys.stdout
    _write_stream(stream, printable(text) + ("\n" if nl else ""), "stderr" if err else "stdout")


def _write_stream(stream, text: str, name: str) -> None:
    try:
        stream.write(text)
        stream.flush()
    except OSError as exc:
        silence_stdout()
        raise ConfigError(
            f"{name}: cannot be written ({exc.strerror or exc}); write to a file with -o "
            "instead, or free the device"
        ) from None


def terminal_width() -> int | None:
    """The width to wrap stdout's tables to: COLUMNS, else the terminal's; None for a pipe."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return None  # not a terminal (a pipe, a file, a test's buffer)


def wants_color(*, err: bool = False) -> bool:
    """Whether text bound for stdout (or stderr) gets colour.

    Only on a terminal, with ``NO_COLOR`` unset or empty (no-color.org) and TERM not "dumb".
    """
    stream = sys.stderr if err else sys.stdout
    isatty = getattr(stream, "isatty", None)
    return (
        bool(isatty and isatty())
        and not os.environ.get("NO_COLOR")
        and os.environ.get("TERM") != "dumb"
    )


def echo_styled(text: str, *, err: bool = False) -> None:
    """Write a renderer's styled text as it is.

    The renderer escaped every untrusted string itself (kvadvisor.report.console), so its own
    colour sequences are the only ones.
    """
    stream = sys.stderr if err else sys.stdout
    _write_stream(stream, text, "stderr" if err else "stdout")


def silence_stdout() -> None:
    """Point stdout at the null device, so nothing left in its buffer fails again at exit."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass  # no real stdout (a test runner's capture): nothing to flush at exit


def write_output(
    target: str, text: str, inputs: InputSet | None = None, *, terminal: bool = False
) -> None:
    """Write ``text`` whole to a file (never over an input), or to stdout for '-'.

    ``terminal`` text (plain text and Markdown reports) has its control characters escaped,
    as everything shown on a terminal has. A file is written atomically (temp file + rename),
    a device or FIFO in place.
    """
    if terminal:
        text = printable(text)
    if target == "-":
        _write_stream(sys.stdout, text, "stdout")
        return
    if inputs is not None:
        inputs.check_output(target)
    write_text(target, text)
    said_written(target)


def said_written(path: Path | str, what: str = "") -> None:
    """One "wrote PATH" line on stderr (``what`` after a colon).

    A quiet run still tells where its output went, and stdout keeps only what was asked for.
    """
    error_line(f"wrote {path}" + (f": {what}" if what else ""))


def command_inputs(
    trace: Path | str | None = None,
    *,
    plans: Iterable[Path] = (),
    rules_dirs: Iterable[Path] = (),
    catalogs: Iterable[Path] = (),
    model: str | None = None,
    results: Path | None = None,
) -> InputSet:
    """Check a command's input files before anything reads them; the set outputs must avoid.

    Each must exist and be a regular file (a trace or a rules folder may be a directory): a
    FIFO or a device is refused here, before a reader could block on it. A trace URI
    (``s3://``) is checked where it is opened: no output can overwrite it.
    """
    found: list[InputFile] = []
    if trace is not None and not is_uri(trace):
        found.append(InputFile("trace", check_input(trace, TraceFormatError, directory_ok=True)))
    found += [InputFile("plan", check_input(p, PlanError, what="plan file")) for p in plans]
    for folder in rules_dirs:
        check_input(folder, RuleSyntaxError, directory_ok=True)
        found.append(InputFile("rules file", Path(folder)))
    found += [InputFile("catalog", check_input(c, CatalogError)) for c in catalogs]
    if results is not None:
        check_input(results, ConfigError, directory_ok=True)
        found.append(InputFile("verify results file", Path(results)))
    if model is not None and model.strip():
        candidate = Path(model)
        if candidate.is_dir():
            candidate = candidate / "config.json"
        if model.endswith(".json") or os.path.lexists(candidate):
            found.append(InputFile("model config", check_input(candidate, CatalogError)))
    return InputSet(found)


def name_option(kind: str) -> Callable[[str | None], str | None]:
    """Option callback: a catalog name (--model, --gpu, --storage) given must not be empty.

    ``kind`` is the catalog as `catalog list` names it (models, gpus, storage), so the error
    names the command that lists the names this option takes.
    """

    def check(value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise typer.BadParameter(
                f"is empty; give a name (`kvadvisor catalog list {kind}` shows them)"
            )
        return value

    return check


def finite_option(value: float | None) -> float | None:
    """Option callback: a float option must be finite (typer's ranges let inf and nan pass)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def seconds_within(value: float, least: float, most: float) -> float:
    """A seconds option: finite and from ``least`` to ``most``, as its help states.

    Options whose range typer would print (``[0.001<=x<=1000000000.0]``) state it in their help
    instead and check it here: typer's range text wraps mid-number at 80 columns.
    """
    finite_option(value)
    if not least <= value <= most:
        raise typer.BadParameter(
            f"{number(value)} is not in {number(least)} to {number(most)} seconds"
        )
    return value


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
# analyze's TRACE: text, not a Path (a Path folds the "//" of s3://bucket/ into one slash).
TraceSourceArg = Annotated[
    str,
    typer.Argument(
        metavar="TRACE",
        help="Request trace (any supported format), a directory of canonical parquet (hive "
        "partitions too), or an s3://, gs:// or az:// URI of them (credentials from the "
        "environment or a profile).",
        show_default=False,
    ),
]
TraceFormatOpt = Annotated[
    TraceFormat | None,
    typer.Option(
        "--trace-format",
        # A named metavar and the choices in the help: a <a|b|...> list of nine formats
        # wrapped mid-word in an 80-column terminal.
        metavar="FORMAT",
        help="Trace format, when auto-detection cannot tell: "
        + ", ".join(f.value for f in TraceFormat)
        + ".",
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
        max=MAX_BLOCK_TOKENS,
        metavar="N",
        help="Tokens per hash block (overrides the format's).",
        rich_help_panel=PANEL_INPUT,
    ),
]


WarmupOpt = Annotated[
    float,
    typer.Option(
        help="Share of requests treated as cache warm-up.",
        metavar="FRACTION",
        min=0.0,
        max=0.99,
        callback=finite_option,
        rich_help_panel=PANEL_CACHE,
    ),
]


class TraceReading(TypedDict):
    """How a command reads its trace, as the API's keywords take it (one place to forward)."""

    trace_format: TraceFormat | None
    column_map: list[str] | None
    block_tokens: int | None


def trace_reading(
    trace_format: TraceFormat | None, maps: list[str] | None, block_tokens: int | None
) -> TraceReading:
    """The --trace-format, --map and --block-tokens options as the API's keywords."""
    return TraceReading(trace_format=trace_format, column_map=maps, block_tokens=block_tokens)


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
ALLOW_OUTSIDE_HELP = (
    "Read a plan's engine_files from outside the plan's folder too (absolute paths, '..', "
    "symlinks out). Off by default: a plan from someone else cannot make kvadvisor read other "
    "files."
)
AllowOutsidePlanDirOpt = Annotated[
    bool,
    typer.Option(
        "--allow-outside-plan-dir",
        help=ALLOW_OUTSIDE_HELP,
        # A panel of its own: the name is too long for the option column of review's table
        # at 80 columns.
        rich_help_panel=PANEL_TRUST,
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
