"""`kvadvisor analyze`: measure a trace and advise a configuration per stage.

The analysis, the renderers and the engine writers are imported where the command runs:
registering it (for `kvadvisor --help`) loads none of them (tests/test_cli_startup.py).
"""

from __future__ import annotations

import os
import shlex
import shutil
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

import kvadvisor
from kvadvisor import phases
from kvadvisor.cli.common import (
    MAX_BLOCK_TOKENS,
    MAX_CACHE_INSTANCES,
    MAX_INSTANCES,
    MAX_TP,
    MAX_WINDOW_S,
    PANEL_CACHE,
    PANEL_DEPLOYMENT,
    PANEL_INPUT,
    PANEL_MODEL,
    PANEL_OUTPUT,
    AllowOutsidePlanDirOpt,
    BlockTokensOpt,
    CatalogOpt,
    IgnoreOpt,
    MapOpt,
    RulesDirOpt,
    SelectOpt,
    TraceFormatOpt,
    TraceSourceArg,
    WarmupOpt,
    app,
    as_strs,
    command_inputs,
    echo,
    echo_styled,
    finite_option,
    handle_user_errors,
    name_option,
    seconds_within,
    trace_reading,
    wants_color,
    write_output,
)
from kvadvisor.cli.progress import Progress
from kvadvisor.errors import ConfigError
from kvadvisor.io.fileio import InputSet, check_writable
from kvadvisor.report import get_renderer
from kvadvisor.units.format import number

if TYPE_CHECKING:
    from kvadvisor.report.registry import Renderer


class ReportFormat(str, Enum):
    """Report formats for --format (the -o file's extension names one too)."""

    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"


def emit_target(value: str) -> str:
    """An ``--emit`` value: a registered engine, or ``plan``; else a usage error naming them.

    Read from the engine registry when the option is parsed (not when the CLI loads), so an
    engine registered after this module is loaded is a target too.
    """
    from kvadvisor.checker import choice_problem
    from kvadvisor.emit import targets  # the registry loads the engine modules on first use

    known = targets()
    if value not in known:
        raise typer.BadParameter(choice_problem(value, known))
    return value


def command_line(ctx: typer.Context) -> str:
    """The analyze command as given on the command line (the header of every emitted file)."""
    words = ["kvadvisor", "analyze"]
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name or "")
        if source is None or source.name != "COMMANDLINE":
            continue
        value = ctx.params.get(param.name or "")
        if not param.opts or not param.opts[0].startswith("-"):
            words.append(str(value))
            continue
        flag = param.opts[0]
        for v in value if isinstance(value, (list, tuple)) else [value]:
            v = getattr(v, "value", v)
            if isinstance(v, bool):
                words.append(flag if v else (param.secondary_opts or [flag])[0])
            else:
                words += [flag, str(v)]
    return shlex.join(words)


def _split_emit_dir(
    emit: list[str] | None, output: list[str] | None
) -> tuple[str | None, list[str] | None]:
    """With --emit, the -o target without a file extension (or a directory) is the config dir."""
    if not emit:
        return None, output
    # os.path.isdir: False for a name the system refuses (too long), which is refused later.
    dirs = [o for o in output or [] if o != "-" and (os.path.isdir(o) or not Path(o).suffix)]
    if len(dirs) != 1:
        raise ConfigError(
            "--emit writes configuration files into a directory: give exactly "
            "one -o DIR (a name without a file extension)"
        )
    return dirs[0], [o for o in output or [] if o != dirs[0]]


MemoryLimitOpt = Annotated[
    str | None,
    typer.Option(
        metavar="SIZE",
        rich_help_panel=PANEL_INPUT,
        help="Memory budget (8GiB, 512MB, 25%). Default: half the machine. A parquet trace or "
        "directory larger than it is streamed, and the cache curve sampled beyond it.",
    ),
]


# --since/--until: seconds on the trace's arrival_s as stored (docs/scale.md).
SinceOpt = Annotated[
    float | None,
    typer.Option(
        "--since",
        metavar="SECONDS",
        callback=finite_option,
        help="Keep the requests arriving at or after this arrival_s (seconds, as the canonical "
        "parquet stores it); row groups before it are not read.",
        rich_help_panel=PANEL_INPUT,
    ),
]
UntilOpt = Annotated[
    float | None,
    typer.Option(
        "--until",
        metavar="SECONDS",
        callback=finite_option,
        help="Keep the requests arriving before this arrival_s (seconds, as stored); row "
        "groups after it are not read.",
        rich_help_panel=PANEL_INPUT,
    ),
]


class Provider(str, Enum):
    """Providers a deployment verdict can be given for (docs/advisor.md)."""

    aws = "aws"
    gcp = "gcp"
    azure = "azure"
    alibaba = "alibaba"
    onprem = "onprem"


class PriceKind(str, Enum):
    """The rates the primary verdict compares (docs/advisor.md, choosing)."""

    on_demand = "on_demand"
    any = "any"


class OverContext(str, Enum):
    """What to do with requests longer than the model's context (docs/advisor.md)."""

    auto = "auto"
    refuse = "refuse"
    rope = "rope"
    exclude = "exclude"


class KvDtype(str, Enum):
    """KV cache element type."""

    bf16 = "bf16"
    fp8 = "fp8"


class WeightDtype(str, Enum):
    """Weight element type."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    fp8_tensor = "fp8-tensor"
    int8 = "int8"
    int4 = "int4"
    fp4 = "fp4"
    mxfp4 = "mxfp4"


ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="MODEL",
        rich_help_panel=PANEL_MODEL,
        callback=name_option("models"),
        help="Served model: catalog name (qwen3-32b), Hugging Face id (Qwen/Qwen3-32B) "
        "or path to a config.json. Default: llama-3.1-70b, reported as assumed.",
    ),
]
GpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        metavar="GPU",
        rich_help_panel=PANEL_MODEL,
        callback=name_option("gpus"),
        help="GPU (h200, h100-sxm, h20, l20, ...). Default: h200, reported as assumed.",
    ),
]
KvDtypeOpt = Annotated[
    KvDtype, typer.Option("--kv-dtype", help="KV cache dtype.", rich_help_panel=PANEL_MODEL)
]
WeightDtypeOpt = Annotated[
    WeightDtype | None,
    typer.Option(
        "--weight-dtype",
        metavar="DTYPE",
        help="Weight dtype: "
        + ", ".join(d.value for d in WeightDtype)
        + ". Default: the checkpoint's published one (FP8 for "
        "DeepSeek-V3/R1, MXFP4 experts for gpt-oss, bf16 for most).",
        rich_help_panel=PANEL_MODEL,
    ),
]
TpOpt = Annotated[
    int | None,
    typer.Option(
        "--tp",
        min=1,
        max=MAX_TP,
        metavar="N",
        rich_help_panel=PANEL_MODEL,
        help="Tensor-parallel GPUs per instance (default: smallest that fits).",
    ),
]
EpOpt = Annotated[
    int,
    typer.Option(
        "--ep",
        min=1,
        metavar="N",
        rich_help_panel=PANEL_MODEL,
        help="MoE models: GPUs of the instance the routed experts are spread over (expert "
        "parallelism; must divide --tp). Default 1: every expert split over the TP GPUs.",
    ),
]
MIN_WINDOW_S = 1e-3


def window_option(value: float) -> float:
    """--window: a finite number of seconds within the range the help states."""
    return seconds_within(value, MIN_WINDOW_S, MAX_WINDOW_S)


WindowOpt = Annotated[
    float,
    typer.Option(
        "--window",
        # The range is checked in the callback and said in the help: typer's own range text
        # ([0.001<=x<=10000000.0]) wrapped mid-number in this panel at 80 columns.
        callback=window_option,
        metavar="SECONDS",
        rich_help_panel=PANEL_DEPLOYMENT,
        help=f"Window of the I/O demand time series ({number(MIN_WINDOW_S)} to "
        f"{number(MAX_WINDOW_S)} s).",
    ),
]
InstancesOpt = Annotated[
    int,
    typer.Option(
        "--instances",
        min=1,
        max=MAX_INSTANCES,
        metavar="N",
        rich_help_panel=PANEL_DEPLOYMENT,
        help="Model instances serving the trace: the stage profile spreads the load over "
        "them. (The cache's routing comparison has its own: --cache-instances.)",
    ),
]
IoUnitOpt = Annotated[
    str,
    typer.Option(
        "--io-unit",
        metavar="SIZE",
        help="Device I/O unit each KV chunk I/O is rounded up to (e.g. '4 KiB').",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
DriveCapacityOpt = Annotated[
    str | None,
    typer.Option(
        "--drive-capacity",
        metavar="SIZE",
        rich_help_panel=PANEL_DEPLOYMENT,
        help="Capacity of the KV drive (e.g. '7.68 TB'): the I/O section then "
        "gives drive writes per day.",
    ),
]


def size_option(option: str, text: str) -> float:
    """Bytes from a size option ('4 KiB', '7.68 TB'); one clear error otherwise."""
    from kvadvisor.units.parse import QuantityError, parse_quantity

    try:
        value = parse_quantity(text, "size")
    except QuantityError as exc:
        raise ConfigError(f"{option} {text!r}: {exc}") from None
    if value <= 0:
        raise ConfigError(f"{option} {text!r}: must be more than 0 bytes")
    return value


# The largest device I/O unit: far above any device's (4 KiB pages, 1 MiB stripes), so a
# chunk is never rounded up to more than it.
MAX_IO_UNIT_BYTES = 1 << 30


def io_unit_bytes(text: str) -> int:
    """The device I/O unit in whole bytes (at least 1, at most 1 GiB)."""
    value = size_option("--io-unit", text)
    if value != int(value):
        raise ConfigError(f"--io-unit {text!r}: must be a whole number of bytes")
    if value > MAX_IO_UNIT_BYTES:
        raise ConfigError(f"--io-unit {text!r}: must be at most 1 GiB (a device I/O unit)")
    return int(value)


# The command's other options, one alias each so its signature is one line per option.
CacheTierOpt = Annotated[
    list[str] | None,
    typer.Option(
        metavar="NAME=TOKENS",
        help="Cache tier, fastest first (e.g. hbm=1M). Repeatable.",
        rich_help_panel=PANEL_CACHE,
    ),
]
CacheInstancesOpt = Annotated[
    int,
    typer.Option(
        metavar="N",
        min=1,
        max=MAX_CACHE_INSTANCES,
        help="Per-instance caches compared under each routing policy against one pool "
        "(cache section only; 1: no comparison). Not the serving --instances.",
        rich_help_panel=PANEL_CACHE,
    ),
]
ChunkTokensOpt = Annotated[
    int | None,
    typer.Option(
        metavar="N",
        min=1,
        max=MAX_BLOCK_TOKENS,
        help="Engine KV chunk size, tokens: coarsen the trace's block hashes to it "
        "and count KV I/Os per chunk (I/O default: 256, LMCache's).",
        rich_help_panel=PANEL_CACHE,
    ),
]
SaveUnfullChunkOpt = Annotated[
    bool,
    typer.Option(
        "--save-unfull-chunk",
        help="Keep a partial last chunk (LMCache save_unfull_chunk).",
        rich_help_panel=PANEL_CACHE,
    ),
]
CacheSampleRateOpt = Annotated[
    float | None,
    typer.Option(
        metavar="RATE",
        min=0.0,
        max=1.0,
        callback=finite_option,
        help="Estimate the cache curve by SHARDS sampling at this rate.",
        rich_help_panel=PANEL_CACHE,
    ),
]
InstanceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--instance",
        metavar="[STAGE=]NAME",
        help="Instance for both stages (NAME) or one stage (prefill=NAME, decode=NAME).",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
StorageOpt = Annotated[
    str | None,
    typer.Option(
        "--storage",
        metavar="NAME",
        callback=name_option("storage"),
        help="The capacity tier below host memory on the nodes that prefill (catalog "
        "name): the search sizes and replays it.",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
ProviderOpt = Annotated[
    list[Provider] | None,
    typer.Option(
        "--provider",
        metavar="PROVIDER",
        help="Give a deployment verdict for this provider: aws, gcp, azure, alibaba or "
        "onprem (default: every provider in the catalog, one verdict each). Repeatable.",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
SloOpt = Annotated[
    str | None,
    typer.Option(
        "--slo",
        metavar="TARGETS",
        help="Latency targets the fleet must meet, METRIC_pNN=TIME, comma-separated, "
        "e.g. ttft_p99=2s (default: MLPerf's server limits for the model).",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
HeadroomOpt = Annotated[
    str | None,
    typer.Option(
        "--headroom",
        metavar="SHARE",
        help="Margin every target keeps: a deployment meets a target only when its "
        "replayed percentile is at most (1 - SHARE) x the target, e.g. 10% or 0 "
        "(default 10%: the step model's median error on MoE models, docs/advisor.md).",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
SpareOpt = Annotated[
    bool,
    typer.Option(
        "--spare",
        help="N+1: one instance per stage more than the fewest that meet the SLO.",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
PriceKindOpt = Annotated[
    PriceKind,
    typer.Option(
        "--price-kind",
        help="The rates the primary verdict compares: on_demand (confirmed on-demand rates "
        "first; calendar, reservation and capacity-block rates ranked apart) or any (every "
        "priced verdict's $/h).",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
OverContextOpt = Annotated[
    OverContext,
    typer.Option(
        "--over-context",
        help="Requests longer than the model's context (prompt + output): refuse (stop, "
        "counting them), rope (serve them at the model's RoPE-scaled context, written into "
        "the engine files), exclude (analyse the rest, counted) or auto (rope when the "
        "scaled context holds them all, else exclude). Always stated in the report.",
        rich_help_panel=PANEL_MODEL,
    ),
]
WorkersOpt = Annotated[
    int,
    typer.Option(
        "--workers",
        metavar="N",
        help="Run the deployment search's providers and replays (and a streamed trace's "
        "partitions, read and prepared) on a local Dask cluster of N processes (default 1: "
        "this process alone; needs kvadvisor[distributed]). "
        "The report is the same.",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDRESS",
        help="Run the deployment search (and a streamed trace's partitions) on an existing "
        "Dask cluster, e.g. tcp://host:8786 (its workers need this kvadvisor and, for the "
        "partitions, the trace's path or URI; docs/scale.md).",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
PlanOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--plan",
        metavar="FILE",
        help="Deployment plan to review against the trace. Repeatable.",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
ReplayOpt = Annotated[
    bool,
    typer.Option(
        "--replay/--no-replay",
        help="Replay the recommended deployment closed loop (its split becomes the report's).",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
SearchOpt = Annotated[
    bool,
    typer.Option(
        "--search/--no-search",
        help="Search deployments per provider, check and stress the picks, and replay the "
        "verdict (--no-search: the measurements and findings only, no verdict; faster).",
        rich_help_panel=PANEL_DEPLOYMENT,
    ),
]
OutputOpt = Annotated[
    list[str] | None,
    typer.Option(
        "-o",
        "--output",
        metavar="FILE",
        help="Report file; the extension names the format (.html, .json, .md, .txt); "
        "'-' is stdout (JSON unless --format). Repeatable.",
        rich_help_panel=PANEL_OUTPUT,
    ),
]
FormatOpt = Annotated[
    ReportFormat | None,
    typer.Option(
        "--format",
        help="Report format when -o cannot tell (or no -o: stdout).",
        rich_help_panel=PANEL_OUTPUT,
    ),
]
QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="No terminal summary (files written are still said).",
        rich_help_panel=PANEL_OUTPUT,
    ),
]
EmitOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--emit",
        metavar="ENGINE",
        parser=emit_target,
        help="Write this engine's configuration (or, with `plan`, the deployment plan) for "
        "the recommended deployment into the -o directory; a name it does not know lists "
        "the engines it does (docs/emit.md). Repeatable.",
        rich_help_panel=PANEL_OUTPUT,
    ),
]


@app.command("analyze")
def analyze_cmd(
    ctx: typer.Context,
    trace: TraceSourceArg,
    # Input
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
    memory_limit: MemoryLimitOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    # Cache
    warmup_fraction: WarmupOpt = 0.5,
    cache_tier: CacheTierOpt = None,
    cache_instances: CacheInstancesOpt = 8,
    chunk_tokens: ChunkTokensOpt = None,
    save_unfull_chunk: SaveUnfullChunkOpt = False,
    cache_sample_rate: CacheSampleRateOpt = None,
    # Model and GPU
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    kv_dtype: KvDtypeOpt = KvDtype.bf16,
    weight_dtype: WeightDtypeOpt = None,
    tp: TpOpt = None,
    ep: EpOpt = 1,
    # Deployment
    instances: InstancesOpt = 1,
    instance: InstanceOpt = None,
    storage: StorageOpt = None,
    provider: ProviderOpt = None,
    slo: SloOpt = None,
    headroom: HeadroomOpt = None,
    spare: SpareOpt = False,
    price_kind: PriceKindOpt = PriceKind.on_demand,
    over_context: OverContextOpt = OverContext.auto,
    workers: WorkersOpt = 1,
    scheduler: SchedulerOpt = None,
    plan: PlanOpt = None,
    allow_outside_plan_dir: AllowOutsidePlanDirOpt = False,
    replay: ReplayOpt = True,
    search: SearchOpt = True,
    window: WindowOpt = 1.0,
    io_unit: IoUnitOpt = "4 KiB",
    drive_capacity: DriveCapacityOpt = None,
    # Rules and catalogs
    rules_dir: RulesDirOpt = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    catalog: CatalogOpt = None,
    # Output
    output: OutputOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
    emit: EmitOpt = None,
) -> None:
    """Analyze a trace and recommend a KV storage configuration per stage."""
    with handle_user_errors():
        files = command_inputs(
            trace, plans=plan or (), rules_dirs=rules_dir or (), catalogs=catalog or (), model=model
        )
        emit_dir, targets, renderers = _report_targets(files, emit, output, fmt)
        progress = Progress(quiet=quiet)
        phases.listen(progress.phase)  # the library names its phases (search 2 of 5, ...)
        try:
            report = kvadvisor.analyze(
                trace,
                rules=as_strs(rules_dir),
                select=as_strs(select),
                ignore=as_strs(ignore),
                catalogs=as_strs(catalog),
                plans=as_strs(plan),
                allow_outside_plan_dir=allow_outside_plan_dir,
                memory_limit=memory_limit,
                **trace_reading(trace_format, maps, block_tokens),
                progress=progress,
                since_s=since,
                until_s=until,
                warmup_fraction=warmup_fraction,
                cache_tiers=as_strs(cache_tier),
                cache_instances=cache_instances,
                cache_chunk_tokens=chunk_tokens,
                cache_save_unfull_chunk=save_unfull_chunk,
                cache_sample_rate=cache_sample_rate,
                replay=replay,
                search=search,
                model=model,
                gpu=gpu,
                kv_dtype=kv_dtype.value,
                weight_dtype=weight_dtype.value if weight_dtype else None,
                tp=tp,
                ep=ep,
                window_s=window,
                instances=instances,
                **_converted_options(io_unit, drive_capacity, chunk_tokens, headroom, emit),
                storage=storage,
                instance=as_strs(instance),
                providers=tuple(p.value for p in provider or ()),
                slo=slo,
                spare=spare,
                price_kind=price_kind.value,
                over_context=over_context.value,
                workers=workers,
                scheduler=scheduler,
            )
        finally:
            phases.listen(None)
        if not quiet:
            _print_summary(report, to_stderr="-" in targets)
        if renderers:
            _write_reports(report, renderers, files, progress)
        if emit:
            # emit_dir is set whenever --emit is given (_split_emit_dir refuses otherwise)
            _write_emitted(ctx, report, emit, Path(emit_dir or ""), files)


def _report_targets(
    files: InputSet, emit: list[str] | None, output: list[str] | None, fmt: ReportFormat | None
) -> tuple[str | None, list[str], list[tuple[str, Renderer]]]:
    """The --emit directory, the report targets and their renderers, each checked writable."""
    emit_dir, output = _split_emit_dir(emit, output)
    fmt_name = fmt.value if fmt else None
    targets = output or (["-"] if fmt_name else [])
    # '-' alone is stdout in JSON, the format a pipe wants; --format names another.
    renderers = [(o, get_renderer(fmt_name or ("json" if o == "-" else None), o)) for o in targets]
    for target in targets:
        files.check_output(target)
    if emit_dir is not None:
        # Before the analysis, as every -o file is: a folder that cannot be made is found
        # now, not after minutes of work.
        check_writable(emit_dir, "-o", directory=True)
    return emit_dir, targets, renderers


def _converted_options(
    io_unit: str,
    drive_capacity: str | None,
    chunk_tokens: int | None,
    headroom: str | None,
    emit: list[str] | None,
) -> dict[str, Any]:
    """The analysis keywords an option gives only converted, or only when it is given."""
    return {
        "io_unit_bytes": io_unit_bytes(io_unit),
        "drive_capacity_bytes": (
            size_option("--drive-capacity", drive_capacity) if drive_capacity is not None else None
        ),
        # Without --chunk-tokens, I/Os are counted at the profiler's default chunk (256).
        **({"chunk_tokens": chunk_tokens} if chunk_tokens else {}),
        # Without --headroom the library's documented default applies.
        **({"headroom": headroom} if headroom is not None else {}),
        # the verdicts replay the KV page of the first engine asked for (docs/emit.md)
        "engine": next((e for e in emit or () if e != "plan"), None),
    }


def _print_summary(report: kvadvisor.Report, *, to_stderr: bool) -> None:
    """The terminal summary: on stderr when a report is written to stdout."""
    from kvadvisor.report.console import ConsoleRenderer

    # The summary shares stdout only when no report is written there. It comes first,
    # so the run ends with the "wrote PATH" lines of what it wrote.
    width = shutil.get_terminal_size().columns
    color = wants_color(err=to_stderr)
    text = ConsoleRenderer(width, color=color).render(report)
    if color:
        echo_styled(text, err=to_stderr)
    else:
        echo(text, nl=False, err=to_stderr)


def _write_reports(
    report: kvadvisor.Report,
    renderers: list[tuple[str, Renderer]],
    files: InputSet,
    progress: Progress,
) -> None:
    """Render every -o report, then write them all."""
    # Rendered first, written after: the run ends with the "wrote PATH" lines.
    with progress.step(phases.REPORT):
        texts = []
        for i, (_, renderer) in enumerate(renderers, 1):
            progress.phase(phases.REPORT, phases.of(i, len(renderers), renderer.name))
            texts.append(renderer.render(report))
    for (target, renderer), text in zip(renderers, texts, strict=True):
        terminal = renderer.name in ("text", "markdown")
        write_output(target, text, files, terminal=terminal)


def _write_emitted(
    ctx: typer.Context, report: kvadvisor.Report, emit: list[str], emit_dir: Path, files: InputSet
) -> None:
    """Write the --emit engine files into the -o directory, saying each target refused."""
    from kvadvisor.emit import emit_targets

    written, refused = emit_targets(report, list(emit), command_line(ctx))
    for engine, why in refused.items():  # the other targets are still written
        echo(f"note: --emit {engine} not written: {why}", err=True)
    for name in written:  # every name first: no half set written before a refusal
        files.check_output(emit_dir / name)
    for name, text in written.items():
        write_output(str(emit_dir / name), text, files)
