"""Command line: each command turns options into one library call and maps errors to exit codes."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvadvisor import __version__
from kvadvisor.advise import AnalyzeOptions, analyze
from kvadvisor.errors import ConfigError, KvAdvisorError
from kvadvisor.report import get_renderer
from kvadvisor.trace import read_trace
from kvadvisor.trace.writers import write_parquet

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
    """The one boundary: a KvAdvisorError becomes one line on stderr and exit 2."""
    try:
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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
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
    Optional[str],
    typer.Option("--trace-format", help="Trace format, when auto-detection cannot tell."),
]


class KvDtype(str, Enum):
    """KV cache element type."""

    bf16 = "bf16"
    fp8 = "fp8"


class WeightDtype(str, Enum):
    """Weight element type."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    int4 = "int4"
    fp4 = "fp4"


ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", help="Served model: catalog name (qwen3-32b), Hugging Face id (Qwen/Qwen3-32B) "
    "or path to a config.json. Default: llama-3.1-70b, reported as assumed.")]
GpuOpt = Annotated[Optional[str], typer.Option(
    "--gpu", help="GPU (h200, h100-sxm, h20, l20, ...). Default: h200, reported as assumed.")]
KvDtypeOpt = Annotated[KvDtype, typer.Option("--kv-dtype", help="KV cache dtype.")]
WeightDtypeOpt = Annotated[WeightDtype, typer.Option("--weight-dtype", help="Weight dtype.")]
TpOpt = Annotated[Optional[int], typer.Option(
    "--tp", min=1, help="Tensor-parallel GPUs per instance (default: smallest that fits).")]
WindowOpt = Annotated[float, typer.Option(
    "--window", min=1e-3, help="Window for I/O demand time series, seconds.")]
ChunkTokensOpt = Annotated[int, typer.Option(
    "--chunk-tokens", min=1, help="KV chunk per I/O, tokens (LMCache's default 256).")]


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
    warmup_fraction: Annotated[
        float, typer.Option(help="Share of requests treated as cache warm-up.", min=0.0, max=0.99)
    ] = 0.5,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    kv_dtype: KvDtypeOpt = KvDtype.bf16,
    weight_dtype: WeightDtypeOpt = WeightDtype.bf16,
    tp: TpOpt = None,
    window: WindowOpt = 1.0,
    chunk_tokens: ChunkTokensOpt = 256,
) -> None:
    """Analyze a trace and recommend a KV storage configuration per stage."""
    with handle_user_errors():
        renderers = [(o, get_renderer(fmt, o)) for o in (output or [])]
        t = read_trace(trace, trace_format)
        options = AnalyzeOptions(
            warmup_fraction=warmup_fraction, model=model, gpu=gpu, kv_dtype=kv_dtype.value,
            weight_dtype=weight_dtype.value, tp=tp, window_s=window, chunk_tokens=chunk_tokens,
        )
        report = analyze(t, options, version=__version__, generated_at=_now())
        for target, renderer in renderers:
            write_output(target, renderer.render(report))
        if not any(o == "-" for o in (output or [])):
            typer.echo(get_renderer("text", None).render(report), nl=False, err=bool(output))


@app.command("convert")
def convert_cmd(
    trace: TraceArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Canonical parquet to write.")],
    trace_format: TraceFormatOpt = None,
) -> None:
    """Convert a trace in any supported format to canonical parquet."""
    with handle_user_errors():
        write_parquet(read_trace(trace, trace_format), output)


def main() -> None:
    """Console-script entry point."""
    app()
