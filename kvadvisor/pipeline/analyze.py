"""The one `analyze` entry: read the trace whole or stream it, whichever fits, and analyse it.

A canonical parquet file (or a directory of them, local or an s3://, gs:// or az:// URI) read
as it is goes through the memory budget (:mod:`kvadvisor.pipeline.streaming`): in memory when
it fits, else streamed. Every other source is read whole by the trace readers and analysed in
memory (:mod:`kvadvisor.pipeline.inmemory`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Protocol

from kvadvisor.errors import ConfigError
from kvadvisor.pipeline.inmemory import analyze_trace
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.pipeline.streaming import analyze_stream, plan_for_stream
from kvadvisor.results.report import AdviceReport
from kvadvisor.trace.detect import TraceFormat, parse_format
from kvadvisor.trace.formats import ColumnMap
from kvadvisor.trace.location import is_uri
from kvadvisor.trace.memory import default_memory_limit_bytes
from kvadvisor.trace.model import Trace
from kvadvisor.trace.readers import read_trace
from kvadvisor.trace.source import file_sha256
from kvadvisor.trace.stream import TraceStream, open_trace_stream, seconds_stored


class Steps(Protocol):
    """Where the pipeline announces its long steps (the CLI's progress display fits)."""

    def step(self, what: str) -> AbstractContextManager[None]:
        """A context for one step, named for the user."""


class _Silent:
    def step(self, what: str) -> AbstractContextManager[None]:
        return nullcontext()


def streamable(
    path: str | Path,
    trace_format: str | TraceFormat | None,
    column_map: ColumnMap,
    block_tokens: int | None,
) -> bool:
    """Canonical parquet (a file, a directory or a URI) read as it is: the memory-budgeted path.

    A file whose arrivals are wall-clock times goes to the whole-file reader, which converts
    them (as `info` and `convert` do). A URI is always streamed: it holds canonical parquet
    only, which the stream says where it does not (a reshaping option is refused there).
    """
    plain = not column_map and block_tokens is None
    fmt = parse_format(trace_format)
    if is_uri(path):
        if not plain or fmt not in (None, TraceFormat.PARQUET):
            raise ConfigError(
                f"{path}: an object-store URI is read as canonical parquet files, which "
                "--trace-format, --map and --block-tokens do not apply to; convert the trace "
                "first (kvadvisor convert FILE -o OUT.parquet) and upload that"
            )
        return True
    path = Path(path)
    return plain and (
        path.is_dir()
        or (
            fmt in (None, TraceFormat.PARQUET)
            and path.suffix == ".parquet"
            and seconds_stored(path)
        )
    )


def analyze_large(
    stream: TraceStream,
    options: AnalyzeOptions | None = None,
    *,
    memory_limit_bytes: int | None = None,
    version: str,
    generated_at: str,
    trace_sha256: str | None = None,
) -> AdviceReport:
    """Analyse a trace of any size within ``memory_limit_bytes`` (default: half the machine).

    In memory (every analysis) when it fits, else one streaming pass (see
    :mod:`kvadvisor.pipeline.streaming`). ``trace_sha256`` (the caller hashed the file) is
    echoed in the report.
    """
    limit = default_memory_limit_bytes() if memory_limit_bytes is None else memory_limit_bytes
    plan = plan_for_stream(stream, limit)
    if plan.mode == "in_memory":
        return analyze_trace(
            stream.read_all(),
            options,
            version=version,
            generated_at=generated_at,
            trace_sha256=trace_sha256,
        )
    return analyze_stream(
        stream,
        options,
        plan=plan,
        version=version,
        generated_at=generated_at,
        trace_sha256=trace_sha256,
    )


def analyze(
    source: str | Path | Trace | TraceStream,
    options: AnalyzeOptions | None = None,
    *,
    version: str,
    generated_at: str,
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
    memory_limit_bytes: int | None = None,
    trace_sha256: str | None = None,
    progress: Steps | None = None,
    since_s: float | None = None,
    until_s: float | None = None,
) -> AdviceReport:
    """Analyse a trace given as a path, a Trace or a TraceStream, and return the report.

    A path is read with ``trace_format``, ``column_map`` and ``block_tokens`` (the trace
    options every command shares) or, when it is plain canonical parquet (a file, a directory
    or an object-store URI), streamed within ``memory_limit_bytes``; a local file's sha256 goes
    into the report. ``since_s``/``until_s`` keep the requests of canonical parquet that arrive
    in that range (seconds, on arrival_s as stored), skipping the row groups outside it.
    ``progress`` is told each long step.
    """
    options = options or AnalyzeOptions()
    ranged = since_s is not None or until_s is not None
    steps = progress or _Silent()
    common = dict(version=version, generated_at=generated_at)
    if ranged and (
        isinstance(source, (Trace, TraceStream))
        or not streamable(source, trace_format, column_map, block_tokens)
    ):
        raise ConfigError(
            f"{getattr(source, 'path', source)}: --since/--until select rows of canonical "
            "parquet read as it is (a file, a directory or an object-store URI); convert the "
            "trace first (kvadvisor convert FILE -o OUT.parquet)"
        )
    if isinstance(source, Trace):
        with steps.step("analyzing"):
            report = analyze_trace(source, options, trace_sha256=trace_sha256, **common)
    elif isinstance(source, TraceStream):
        with steps.step(f"analyzing {source.path} in batches"):
            report = analyze_large(
                source,
                options,
                memory_limit_bytes=memory_limit_bytes,
                trace_sha256=trace_sha256,
                **common,
            )
    elif streamable(source, trace_format, column_map, block_tokens):
        with steps.step(f"analyzing {source} in batches"):
            report = analyze_large(
                open_trace_stream(source, since_s=since_s, until_s=until_s),
                options,
                memory_limit_bytes=memory_limit_bytes,
                # A URI's objects are not fetched a second time to hash them.
                trace_sha256=None if is_uri(source) else file_sha256(source),
                **common,
            )
    else:
        with steps.step(f"reading {source}"):
            # A CSV is parsed whole: its text is held to the memory limit as it is read.
            limit = (
                default_memory_limit_bytes() if memory_limit_bytes is None else memory_limit_bytes
            )
            trace = read_trace(
                source,
                trace_format,
                column_map=column_map,
                block_tokens=block_tokens,
                max_text_bytes=limit,
            )
            sha256 = file_sha256(source)
        with steps.step("analyzing"):
            report = analyze_trace(trace, options, trace_sha256=sha256, **common)
    if options.plans and not report.plan_reviews:
        where = source.path if isinstance(source, TraceStream) else source
        raise ConfigError(
            f"{where}: too large to replay per request within the "
            "memory limit, so --plan cannot be reviewed; use `kvadvisor review` on a sample of "
            "the trace"
        )
    return report
