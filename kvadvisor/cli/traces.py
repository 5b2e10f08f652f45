"""Trace commands: `convert`, `info` and `synth`.

Readers and writers are imported inside the commands: registering them (for `kvadvisor
--help`) loads neither pyarrow nor numpy (tests/test_cli_startup.py).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

import kvadvisor
from kvadvisor.cli.common import (
    BlockTokensOpt,
    MapOpt,
    TraceArg,
    TraceFormatOpt,
    TraceSourceArg,
    app,
    command_inputs,
    echo,
    handle_user_errors,
    said_written,
)
from kvadvisor.errors import ConfigError


class Arrival(str, Enum):
    """Gap distributions for --arrival: ``kvadvisor.synth.ArrivalProcess``'s values.

    Declared here so that `kvadvisor --help` need not import the generator (and numpy);
    tests/test_cli_startup.py keeps the two equal.
    """

    poisson = "poisson"
    bursty = "bursty"


class OutFormat(str, Enum):
    """What `convert --to` writes (kvadvisor.trace.writers.FORMATS; tests keep them equal)."""

    parquet = "parquet"
    csv = "csv"
    mooncake = "mooncake"


# The extension each format is named by, and what the "wrote" line calls it.
EXTENSIONS = {"parquet": ".parquet", "csv": ".csv", "mooncake": ".jsonl"}
WORDS = {"parquet": "canonical parquet", "csv": "canonical CSV", "mooncake": "Mooncake JSONL"}


@app.command("convert")
def convert_cmd(
    trace: TraceArg,
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", help="File to write; its extension names the format (--to)."
        ),
    ],
    to: Annotated[
        OutFormat | None,
        typer.Option(
            "--to",
            help="parquet (canonical, lossless), csv (canonical CSV: every column, no "
            "metadata) or mooncake (Mooncake JSONL: arrival, tokens, hashes). Default: "
            "from -o's extension (.parquet, .csv, .jsonl).",
        ),
    ] = None,
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
) -> None:
    """Convert a trace in any supported format to canonical parquet, CSV or Mooncake JSONL."""
    with handle_user_errors():
        command_inputs(trace).check_output(output)
        by_name = next((f for f, ext in EXTENSIONS.items() if output.suffix.lower() == ext), None)
        fmt = to.value if to else by_name
        if fmt is None:
            raise ConfigError(
                f"-o {output}: name it *.parquet, *.csv or *.jsonl, or give --to "
                "parquet|csv|mooncake"
            )
        written = kvadvisor.convert(
            trace,
            output,
            trace_format=trace_format,
            column_map=maps,
            block_tokens=block_tokens,
            to=fmt,
        )
        said_written(written, WORDS[fmt])


@app.command("info")
def info_cmd(
    trace: TraceSourceArg,
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
) -> None:
    """Show a trace's format, size, time span, columns, and what each analysis can do with it."""
    from kvadvisor.trace.describe import format_description

    with handle_user_errors():
        command_inputs(trace)
        info = kvadvisor.describe(
            trace, trace_format=trace_format, column_map=maps, block_tokens=block_tokens
        )
        echo(format_description(info), nl=False)


@app.command("synth")
def synth_cmd(
    output: Annotated[Path, typer.Option("-o", "--output", help="Parquet file to write.")],
    requests: Annotated[int, typer.Option(help="Number of requests.", min=0)] = 100_000,
    seed: Annotated[int, typer.Option(help="Random seed: same seed, same trace.")] = 0,
    rate: Annotated[float, typer.Option(help="Mean arrival rate, requests per second.")] = 10.0,
    arrival: Annotated[Arrival, typer.Option(help="Gap distribution.")] = Arrival.poisson,
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
        shape = kvadvisor.SynthShape(
            requests=requests,
            seed=seed,
            block_tokens=block_tokens,
            rate_per_s=rate,
            arrival=arrival.value,
            burst_cv=burst_cv,
            diurnal_amplitude=diurnal_amplitude,
            diurnal_period_s=diurnal_period,
            input_tokens_median=input_median,
            input_tokens_sigma=input_sigma,
            output_tokens_median=output_median,
            output_tokens_sigma=output_sigma,
            sessions=sessions,
            session_zipf=session_zipf,
            mean_requests_per_session=requests_per_session,
            system_prompts=system_prompts,
            system_prompt_zipf=system_prompt_zipf,
            system_prompt_tokens_median=system_prompt_median,
        )
        result = kvadvisor.synthesize(output, shape, chunk_rows=chunk_rows)
        echo(
            f"wrote {result.path}: {result.requests} requests, {result.block_hashes} block "
            f"hashes, {result.batches} row groups, {result.file_bytes} bytes",
            err=True,
        )
