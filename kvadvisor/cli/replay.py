"""`kvadvisor replay`: run a trace through a plan's deployment, closed loop (docs/replay.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import kvadvisor
from kvadvisor.cli.common import (
    MAX_WINDOW_S,
    AllowOutsidePlanDirOpt,
    BlockTokensOpt,
    CatalogOpt,
    MapOpt,
    TraceArg,
    TraceFormatOpt,
    app,
    as_strs,
    command_inputs,
    echo,
    finite_option,
    handle_user_errors,
    said_written,
    seconds_within,
    trace_reading,
    write_output,
)
from kvadvisor.errors import ConfigError
from kvadvisor.io.fileio import output_stream, write_parquet_batches
from kvadvisor.units.format import plural

# Longest drain past the last arrival: 31.7 years, the longest span a trace may have.
MAX_DRAIN_CAP_S = 1e9

_FORMATS = {".json": "json", ".html": "html", ".htm": "html", ".txt": "text"}


def _format(target: str) -> str:
    suffix = Path(target).suffix.lower() if target != "-" else ".json"
    if suffix not in _FORMATS:
        raise ConfigError(
            f"cannot tell the replay format from '{target}': use .json, .html or .txt "
            "('-' is JSON on stdout)"
        )
    return _FORMATS[suffix]


# Time slices and the cluster: options of their own, so the command body stays short.
MIN_SLICE_S = 0.001


TimeSliceOpt = Annotated[
    float | None,
    typer.Option(
        "--time-slice",
        metavar="SECONDS",
        help="Replay in independent time slices of this length, 0.001 s or more (tasks on "
        "--workers); default: the whole trace at once. docs/replay.md says what slicing "
        "changes.",
        # The range is checked in the callback and said in the help: typer's own range text
        # ([0.001<=x<=1000000000.0]) wrapped mid-number at 80 columns.
        callback=lambda v: None if v is None else seconds_within(v, MIN_SLICE_S, MAX_DRAIN_CAP_S),
    ),
]
SliceWarmupOpt = Annotated[
    float,
    typer.Option(
        "--slice-warmup",
        metavar="SECONDS",
        help="Each time slice first replays the requests of this many seconds before it, "
        "not counted (warm caches and queues).",
        callback=lambda v: seconds_within(v, 0.0, MAX_DRAIN_CAP_S),
    ),
]
WorkersOpt = Annotated[
    int,
    typer.Option(
        "--workers",
        metavar="N",
        help="Replay the replica groups (or time slices) on a local Dask cluster of N "
        "processes (default 1: this process; needs kvadvisor[distributed]). Same figures.",
    ),
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDRESS",
        help="Replay on an existing Dask cluster, e.g. tcp://host:8786 (docs/scale.md).",
    ),
]


@app.command("replay")
def replay_cmd(
    trace: TraceArg,
    plan: Annotated[Path, typer.Option("--plan", help="Deployment plan (YAML).")],
    output: Annotated[
        list[str] | None,
        typer.Option("-o", "--output", help="replay.json, replay.html or .txt; '-' is stdout."),
    ] = None,
    requests_out: Annotated[
        Path | None,
        typer.Option("--requests-out", help="Write one row per request (parquet)."),
    ] = None,
    steps_out: Annotated[
        Path | None,
        typer.Option("--steps-out", help="Write one row per step per replica (parquet)."),
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo",
            help="Targets on top of the plan's: NAME=VALUE pairs joined by commas, e.g. "
            "ttft_p90=2s and tpot_p90=50ms.",
        ),
    ] = None,
    window: Annotated[
        float,
        typer.Option(
            "--window",
            help="Demand window, seconds.",
            min=0.001,
            max=MAX_WINDOW_S,
            callback=finite_option,
        ),
    ] = 1.0,
    drain_cap: Annotated[
        float | None,
        typer.Option(
            "--drain-cap",
            help="Seconds to run past the last arrival (default: the trace's span, >= 600).",
            min=0.0,
            max=MAX_DRAIN_CAP_S,
            callback=finite_option,
        ),
    ] = None,
    time_slice: TimeSliceOpt = None,
    slice_warmup: SliceWarmupOpt = 0.0,
    workers: WorkersOpt = 1,
    scheduler: SchedulerOpt = None,
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
    catalog: CatalogOpt = None,
    allow_outside_plan_dir: AllowOutsidePlanDirOpt = False,
) -> None:
    """Replay a trace through a deployment: latencies, GPU time per stage, tier and link demand."""
    with handle_user_errors():
        files = command_inputs(trace, plans=[plan], catalogs=catalog or ())
        targets = [(o, _format(o)) for o in (output or [])]
        named = {requests_out: "--requests-out", steps_out: "--steps-out"}
        for target in [*(output or []), *(p for p in (requests_out, steps_out) if p is not None)]:
            files.check_output(target, named.get(target, "-o"))  # type: ignore[call-overload]
        result = kvadvisor.replay(
            trace,
            plan,
            slo=slo,
            window_s=window,
            drain_cap_s=drain_cap,
            catalogs=as_strs(catalog),
            **trace_reading(trace_format, maps, block_tokens),
            allow_outside_plan_dir=allow_outside_plan_dir,
            # the HTML page charts the busiest minute's steps
            step_log=steps_out is not None or any(kind == "html" for _, kind in targets),
            slice_s=time_slice,
            slice_warmup_s=slice_warmup,
            workers=workers,
            scheduler=scheduler,
        )
        render = {"json": result.to_json, "html": result.to_html, "text": result.to_text}
        for target, kind in targets:
            write_output(target, render[kind](), files, terminal=kind == "text")
        if requests_out is not None:
            import pyarrow.parquet as pq

            # A file object, never the path: pyarrow deletes a path whose write failed, which
            # for a device named as the output (/dev/full) would delete the device node.
            with output_stream(requests_out) as fh:
                pq.write_table(result.requests_table(), fh)
        if steps_out is not None:
            rows = write_parquet_batches(steps_out, result.step_batches(), result.step_schema())
            said_written(steps_out, plural(rows, "step"))
        if not any(o == "-" for o in (output or [])):
            echo(result.to_text(), nl=False)
