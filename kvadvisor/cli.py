"""Command line: each command turns options into one library call and maps errors to exit codes."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from kvadvisor import __version__
from kvadvisor.advise import AnalyzeOptions, analyze
from kvadvisor.cache import parse_tier
from kvadvisor.errors import ConfigError, KvAdvisorError, KvAdvisorWarning
from kvadvisor.progress import Progress
from kvadvisor.report import get_renderer
from kvadvisor.report.console import ConsoleRenderer
from kvadvisor.trace import (
    Trace,
    TraceFormat,
    describe_trace,
    detect_format,
    parse_column_map,
    read_trace,
    write_parquet,
)
from kvadvisor.trace.describe import format_description

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

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
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


def _file_mode() -> int:
    """The mode a new file gets under the umask (mkstemp alone would leave it 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_output(target: str, text: str) -> None:
    """Write ``text`` to a file atomically (temp file + rename), or to stdout for '-'."""
    if target == "-":
        sys.stdout.write(text)
        return
    path = Path(target)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give an output file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ReportFormat(str, Enum):
    """Report formats for --format (the -o file's extension names one too)."""

    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"


def file_sha256(path: Path) -> str | None:
    """sha256 (hex) of a trace file, read in 1 MiB chunks; None for a directory of files."""
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


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
        "--trace-format", help="Trace format, when auto-detection cannot tell.",
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


def _read(
    trace: Path,
    trace_format: TraceFormat | None,
    maps: list[str] | None,
    block_tokens: int | None,
) -> Trace:
    """Read a trace with the trace options every command shares."""
    return read_trace(
        trace, trace_format, column_map=parse_column_map(maps), block_tokens=block_tokens
    )


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Show version."),
    ] = False,
) -> None:
    """kvadvisor: measure first, then configure."""


@app.command("analyze")
def analyze_cmd(
    trace: TraceArg,
    output: Annotated[
        list[str] | None,
        typer.Option(
            "-o",
            "--output",
            help="Report file; the extension names the format (.html, .json, .md, .txt); "
            "'-' is stdout. Repeatable.",
        ),
    ] = None,
    fmt: Annotated[
        ReportFormat | None,
        typer.Option("--format", help="Report format when -o cannot tell (or no -o: stdout)."),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No terminal summary.")
    ] = False,
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
    warmup_fraction: Annotated[
        float, typer.Option(help="Share of requests treated as cache warm-up.", min=0.0, max=0.99)
    ] = 0.5,
    cache_tier: Annotated[
        list[str] | None,
        typer.Option(help="Cache tier NAME=TOKENS, fastest first (e.g. hbm=1M). Repeatable."),
    ] = None,
    cache_instances: Annotated[
        int, typer.Option(help="Serving instances for the routing comparison (1: off).", min=1)
    ] = 8,
    chunk_tokens: Annotated[
        int | None,
        typer.Option(help="Engine KV chunk size: coarsen the trace's block hashes to it.", min=1),
    ] = None,
    save_unfull_chunk: Annotated[
        bool, typer.Option(help="Keep a partial last chunk (LMCache save_unfull_chunk).")
    ] = False,
    cache_sample_rate: Annotated[
        float | None,
        typer.Option(help="Estimate the cache curve by SHARDS sampling at this rate.", min=0.0),
    ] = None,
) -> None:
    """Analyze a trace and recommend a KV storage configuration per stage."""
    with handle_user_errors():
        fmt_name = fmt.value if fmt else None
        targets = output or (["-"] if fmt_name else [])
        renderers = [(o, get_renderer(fmt_name, o)) for o in targets]
        options = AnalyzeOptions(
            warmup_fraction=warmup_fraction,
            cache_tiers=tuple(parse_tier(x) for x in (cache_tier or [])),
            cache_instances=cache_instances,
            cache_chunk_tokens=chunk_tokens,
            cache_save_unfull_chunk=save_unfull_chunk,
            cache_sample_rate=cache_sample_rate,
        )
        progress = Progress()
        with progress.step(f"reading {trace}"):
            t = _read(trace, trace_format, maps, block_tokens)
            sha256 = file_sha256(trace)
        with progress.step("analyzing"):
            report = analyze(
                t,
                options,
                version=__version__,
                generated_at=_now(),
                trace_sha256=sha256,
            )
        for target, renderer in renderers:
            with progress.step(f"writing {renderer.name} report to {target}"):
                write_output(target, renderer.render(report))
        if not quiet:
            # The summary shares stdout only when no report is written there.
            to_stderr = "-" in targets
            width = shutil.get_terminal_size().columns
            typer.echo(ConsoleRenderer(width).render(report), nl=False, err=to_stderr)


@app.command("convert")
def convert_cmd(
    trace: TraceArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Canonical parquet to write.")],
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
) -> None:
    """Convert a trace in any supported format to canonical parquet."""
    with handle_user_errors():
        if output.suffix.lower() != ".parquet":
            raise ConfigError(f"-o {output}: convert writes canonical parquet; name it *.parquet")
        write_parquet(_read(trace, trace_format, maps, block_tokens), output)


@app.command("info")
def info_cmd(
    trace: TraceArg,
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
) -> None:
    """Show a trace's format, size, time span, columns, and what each analysis can do with it."""
    with handle_user_errors():
        t = _read(trace, trace_format, maps, block_tokens)
        typer.echo(format_description(describe_trace(t, trace_format or detect_format(trace))),
                   nl=False)


def main() -> None:
    """Console-script entry point."""
    app()
