"""Command line: each command turns options into one library call and maps errors to exit codes."""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvadvisor import __version__
from kvadvisor.advise import AnalyzeOptions, analyze
from kvadvisor.advise.model import AdviceReport
from kvadvisor.advise.streaming import analyze_large, parse_memory_limit
from kvadvisor.cache.tiers import parse_tier
from kvadvisor.errors import ConfigError, KvAdvisorError, KvAdvisorWarning
from kvadvisor.report import get_renderer
from kvadvisor.synth import ArrivalProcess, SynthShape, write_synth_parquet
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
from kvadvisor.trace.stream import open_trace_stream

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
    Optional[TraceFormat],
    typer.Option(
        "--trace-format", help="Trace format, when auto-detection cannot tell.",
        case_sensitive=False,
    ),
]
MapOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--map",
        metavar="CANONICAL=SOURCE[:UNIT]",
        help="Canonical CSV/parquet: take a canonical column from a source column "
        "(repeatable), e.g. --map input_tokens=prompt_len --map arrival_s=ts:ms.",
    ),
]
BlockTokensOpt = Annotated[
    Optional[int],
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


MemoryLimitOpt = Annotated[
    Optional[str],
    typer.Option(
        help="Memory budget (8GiB, 512MB, 25%). Default: half the machine. A parquet trace or "
        "directory larger than it is streamed, and the cache curve sampled beyond it.",
    ),
]


def _streamable(trace: Path, trace_format: object, maps: object, block_tokens: object) -> bool:
    """Canonical parquet (a file or a directory) read as it is: the memory-budgeted path."""
    plain = maps is None and block_tokens is None
    fmt = getattr(trace_format, "value", trace_format)
    return plain and (trace.is_dir() or (fmt in (None, "parquet") and trace.suffix == ".parquet"))


def _analyze_large(trace: Path, options: AnalyzeOptions, memory_limit: Optional[str]
                   ) -> AdviceReport:
    limit = parse_memory_limit(memory_limit) if memory_limit is not None else None
    return analyze_large(open_trace_stream(trace), options, memory_limit_bytes=limit,
                         version=__version__, generated_at=_now())


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
        Optional[list[str]],
        typer.Option("-o", "--output", help="Report file (.json, ...); '-' is stdout. Repeatable."),
    ] = None,
    fmt: Annotated[
        Optional[str], typer.Option("--format", help="Report format when -o cannot tell.")
    ] = None,
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
    warmup_fraction: Annotated[
        float, typer.Option(help="Share of requests treated as cache warm-up.", min=0.0, max=0.99)
    ] = 0.5,
    cache_tier: Annotated[
        Optional[list[str]],
        typer.Option(help="Cache tier NAME=TOKENS, fastest first (e.g. hbm=1M). Repeatable."),
    ] = None,
    cache_instances: Annotated[
        int, typer.Option(help="Serving instances for the routing comparison (1: off).", min=1)
    ] = 8,
    chunk_tokens: Annotated[
        Optional[int],
        typer.Option(help="Engine KV chunk size: coarsen the trace's block hashes to it.", min=1),
    ] = None,
    save_unfull_chunk: Annotated[
        bool, typer.Option(help="Keep a partial last chunk (LMCache save_unfull_chunk).")
    ] = False,
    cache_sample_rate: Annotated[
        Optional[float],
        typer.Option(help="Estimate the cache curve by SHARDS sampling at this rate.", min=0.0),
    ] = None,
    memory_limit: MemoryLimitOpt = None,
) -> None:
    """Analyze a trace and recommend a KV storage configuration per stage."""
    with handle_user_errors():
        renderers = [(o, get_renderer(fmt, o)) for o in (output or [])]
        options = AnalyzeOptions(
            warmup_fraction=warmup_fraction,
            cache_tiers=tuple(parse_tier(x) for x in (cache_tier or [])),
            cache_instances=cache_instances,
            cache_chunk_tokens=chunk_tokens,
            cache_save_unfull_chunk=save_unfull_chunk,
            cache_sample_rate=cache_sample_rate,
        )
        if _streamable(trace, trace_format, maps, block_tokens):
            report = _analyze_large(trace, options, memory_limit)
        else:
            t = _read(trace, trace_format, maps, block_tokens)
            report = analyze(
                t,
                options,
                version=__version__,
                generated_at=_now(),
            )
        for target, renderer in renderers:
            write_output(target, renderer.render(report))
        if not any(o == "-" for o in (output or [])):
            typer.echo(get_renderer("text", None).render(report), nl=False, err=bool(output))


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


@app.command("synth")
def synth_cmd(
    output: Annotated[Path, typer.Option("-o", "--output", help="Parquet file to write.")],
    requests: Annotated[int, typer.Option(help="Number of requests.", min=0)] = 100_000,
    seed: Annotated[int, typer.Option(help="Random seed: same seed, same trace.")] = 0,
    rate: Annotated[float, typer.Option(help="Mean arrival rate, requests per second.")] = 10.0,
    arrival: Annotated[ArrivalProcess, typer.Option(help="Gap distribution.")] = (
        ArrivalProcess.POISSON
    ),
    burst_cv: Annotated[float, typer.Option(help="Gap CV when --arrival bursty.")] = 3.0,
    diurnal_amplitude: Annotated[float, typer.Option(help="Rate swing, 0 <= A < 1.")] = 0.0,
    diurnal_period: Annotated[float, typer.Option(help="Diurnal period, seconds.")] = 86_400.0,
    input_median: Annotated[float, typer.Option(help="Median prompt tokens.")] = 2048.0,
    input_sigma: Annotated[float, typer.Option(help="Prompt log-length std dev.")] = 1.0,
    output_median: Annotated[float, typer.Option(help="Median output tokens.")] = 256.0,
    output_sigma: Annotated[float, typer.Option(help="Output log-length std dev.")] = 1.0,
    sessions: Annotated[int, typer.Option(help="Concurrent session slots.")] = 10_000,
    session_zipf: Annotated[float, typer.Option(help="Zipf exponent of slot popularity.")] = 1.0,
    requests_per_session: Annotated[float, typer.Option(help="Mean requests per session.")] = 8.0,
    system_prompts: Annotated[int, typer.Option(help="Distinct system prompts.")] = 100,
    system_prompt_zipf: Annotated[float, typer.Option(help="Zipf exponent of prompts.")] = 1.2,
    system_prompt_median: Annotated[float, typer.Option(help="Median prompt tokens.")] = 1024.0,
    block_tokens: Annotated[int, typer.Option(help="Tokens per hash block.")] = 512,
    chunk_rows: Annotated[int, typer.Option(help="Requests generated per batch.")] = 1 << 20,
) -> None:
    """Write a deterministic synthetic trace with a chosen shape, streamed to parquet."""
    with handle_user_errors():
        shape = SynthShape(
            requests=requests, seed=seed, block_tokens=block_tokens, rate_per_s=rate,
            arrival=arrival, burst_cv=burst_cv, diurnal_amplitude=diurnal_amplitude,
            diurnal_period_s=diurnal_period, input_tokens_median=input_median,
            input_tokens_sigma=input_sigma, output_tokens_median=output_median,
            output_tokens_sigma=output_sigma, sessions=sessions, session_zipf=session_zipf,
            mean_requests_per_session=requests_per_session, system_prompts=system_prompts,
            system_prompt_zipf=system_prompt_zipf, system_prompt_tokens_median=system_prompt_median,
        )
        result = write_synth_parquet(shape, output, chunk_rows)
        typer.echo(
            f"wrote {result.path}: {result.requests} requests, {result.block_hashes} block "
            f"hashes, {result.batches} row groups, {result.file_bytes} bytes",
            err=True,
        )


def main() -> None:
    """Console-script entry point."""
    app()
