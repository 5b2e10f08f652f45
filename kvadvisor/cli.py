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
from kvadvisor.advise import (
    AnalyzeOptions,
    analyze,
    load_advisor_inputs,
    load_rule_set,
    render_facts_doc,
)
from kvadvisor.advise.model import AdviceReport
from kvadvisor.advise.review import review_trace
from kvadvisor.advise.streaming import analyze_large, parse_memory_limit
from kvadvisor.cache.tiers import parse_tier
from kvadvisor.catalog.instances import find_instance
from kvadvisor.catalog.listing import entry_text, instances_table, storage_table
from kvadvisor.catalog.storage import find_storage
from kvadvisor.emit import emit_config
from kvadvisor.errors import ConfigError, KvAdvisorError, KvAdvisorWarning
from kvadvisor.plan import PlanCatalogs, load_plan
from kvadvisor.progress import Progress
from kvadvisor.report import get_renderer
from kvadvisor.report.console import ConsoleRenderer
from kvadvisor.report.junit import JUnitRenderer
from kvadvisor.report.review_markdown import ReviewMarkdownRenderer, ReviewTextRenderer
from kvadvisor.rules import builtin_rules_dir
from kvadvisor.rules.docs import find_rule, render_rules_doc, rule_text, rules_table
from kvadvisor.synth import ArrivalProcess, SynthShape, write_synth_parquet
from kvadvisor.trace import (
    Trace,
    TraceFormat,
    describe_trace,
    detect_format,
    format_description,
    parse_column_map,
    read_trace,
    write_parquet,
)
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


class Engine(str, Enum):
    """Serving engines whose configuration `analyze --emit` writes."""

    lmcache = "lmcache"
    sglang_hicache = "sglang-hicache"
    dynamo_kvbm = "dynamo-kvbm"
    mooncake = "mooncake"


def _split_emit_dir(
    emit: list[Engine] | None, output: list[str] | None
) -> tuple[str | None, list[str] | None]:
    """With --emit, the -o target without a file extension (or a directory) is the config dir."""
    if not emit:
        return None, output
    dirs = [o for o in output or [] if o != "-" and (Path(o).is_dir() or not Path(o).suffix)]
    if len(dirs) != 1:
        raise ConfigError("--emit writes configuration files into a directory: give exactly "
                          "one -o DIR (a name without a file extension)")
    return dirs[0], [o for o in output or [] if o != dirs[0]]


def plan_catalogs(extra: list[Path] | None) -> PlanCatalogs:
    """The catalogs plan files may name: the packaged ones plus --catalog files."""
    return PlanCatalogs.packaged(tuple(str(p) for p in extra or ()))


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
    typer.Option("--catalog", help="Catalog file adding or overriding entries (repeatable).",
                 dir_okay=False),
]


def _strs(values: list | None) -> tuple[str, ...]:
    return tuple(str(v) for v in values or ())


MemoryLimitOpt = Annotated[
    str | None,
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


def _analyze_large(trace: Path, options: AnalyzeOptions, memory_limit: str | None
                   ) -> AdviceReport:
    limit = parse_memory_limit(memory_limit) if memory_limit is not None else None
    sha256 = file_sha256(trace) if trace.is_file() else None
    return analyze_large(open_trace_stream(trace), options, memory_limit_bytes=limit,
                         version=__version__, generated_at=_now(), trace_sha256=sha256)


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


ModelOpt = Annotated[str | None, typer.Option(
    "--model", help="Served model: catalog name (qwen3-32b), Hugging Face id (Qwen/Qwen3-32B) "
    "or path to a config.json. Default: llama-3.1-70b, reported as assumed.")]
GpuOpt = Annotated[str | None, typer.Option(
    "--gpu", help="GPU (h200, h100-sxm, h20, l20, ...). Default: h200, reported as assumed.")]
KvDtypeOpt = Annotated[KvDtype, typer.Option("--kv-dtype", help="KV cache dtype.")]
WeightDtypeOpt = Annotated[WeightDtype, typer.Option("--weight-dtype", help="Weight dtype.")]
TpOpt = Annotated[int | None, typer.Option(
    "--tp", min=1, help="Tensor-parallel GPUs per instance (default: smallest that fits).")]
WindowOpt = Annotated[float, typer.Option(
    "--window", min=1e-3, help="Window for I/O demand time series, seconds.")]
DEFAULT_IO_CHUNK_TOKENS = 256  # LMCache's chunk_size: KV I/Os are counted per chunk


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
        typer.Option(help="Engine KV chunk size, tokens: coarsen the trace's block hashes to it "
                     "and count KV I/Os per chunk (I/O default: 256, LMCache's).", min=1),
    ] = None,
    save_unfull_chunk: Annotated[
        bool, typer.Option(help="Keep a partial last chunk (LMCache save_unfull_chunk).")
    ] = False,
    cache_sample_rate: Annotated[
        float | None,
        typer.Option(help="Estimate the cache curve by SHARDS sampling at this rate.", min=0.0),
    ] = None,
    rules_dir: RulesDirOpt = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    catalog: CatalogOpt = None,
    storage: Annotated[
        str | None, typer.Option("--storage", help="One storage spec (catalog name) for both "
                                    "stages: per-stage utilization and idle-stage warnings.")
    ] = None,
    instance: Annotated[
        list[str] | None, typer.Option("--instance", help="Instance for both stages (NAME) or "
                                          "one stage (prefill=NAME, decode=NAME).")
    ] = None,
    emit: Annotated[
        list[Engine] | None,
        typer.Option("--emit", help="Write this engine's configuration into the -o directory."),
    ] = None,
    plan: Annotated[
        list[Path] | None,
        typer.Option("--plan", help="Deployment plan to review against the trace. Repeatable."),
    ] = None,
    memory_limit: MemoryLimitOpt = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    kv_dtype: KvDtypeOpt = KvDtype.bf16,
    weight_dtype: WeightDtypeOpt = WeightDtype.bf16,
    tp: TpOpt = None,
    window: WindowOpt = 1.0,
) -> None:
    """Analyze a trace and recommend a KV storage configuration per stage."""
    with handle_user_errors():
        emit_dir, output = _split_emit_dir(emit, output)
        fmt_name = fmt.value if fmt else None
        targets = output or (["-"] if fmt_name else [])
        renderers = [(o, get_renderer(fmt_name, o)) for o in targets]
        inputs = load_advisor_inputs(_strs(rules_dir), _strs(select), _strs(ignore),
                                     _strs(catalog))
        options = AnalyzeOptions(
            warmup_fraction=warmup_fraction,
            cache_tiers=tuple(parse_tier(x) for x in (cache_tier or [])),
            cache_instances=cache_instances,
            cache_chunk_tokens=chunk_tokens,
            cache_save_unfull_chunk=save_unfull_chunk,
            cache_sample_rate=cache_sample_rate,
            model=model, gpu=gpu, kv_dtype=kv_dtype.value, weight_dtype=weight_dtype.value,
            tp=tp, window_s=window, chunk_tokens=chunk_tokens or DEFAULT_IO_CHUNK_TOKENS,
            storage=storage,
            instance=_strs(instance),
            advisor_inputs=inputs,
            plans=tuple(load_plan(p, PlanCatalogs(inputs.storage, inputs.instances))
                        for p in plan or ()),
        )
        progress = Progress()
        if _streamable(trace, trace_format, maps, block_tokens):
            with progress.step(f"analyzing {trace} in batches"):
                report = _analyze_large(trace, options, memory_limit)
        else:
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
        if options.plans and not report.plan_reviews:
            raise ConfigError(f"{trace}: too large to replay per request within the memory "
                              "limit, so --plan cannot be reviewed; use `kvadvisor review` on "
                              "a sample of the trace")
        for target, renderer in renderers:
            with progress.step(f"writing {renderer.name} report to {target}"):
                write_output(target, renderer.render(report))
        for engine in emit or []:
            for name, text in emit_config(report, engine.value).items():
                write_output(str(Path(emit_dir) / name), text)
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


rules_app = typer.Typer(help="List, show and check rules; print the rule and fact docs.",
                        no_args_is_help=True)
app.add_typer(rules_app, name="rules")


@rules_app.command("list")
def rules_list_cmd(rules_dir: RulesDirOpt = None, select: SelectOpt = None,
                   ignore: IgnoreOpt = None) -> None:
    """List the rules (built-in plus --rules), after --select / --ignore."""
    with handle_user_errors():
        typer.echo(rules_table(load_rule_set(_strs(rules_dir), _strs(select), _strs(ignore))),
                   nl=False)


@rules_app.command("show")
def rules_show_cmd(rule: Annotated[str, typer.Argument(help="Rule code or name.")],
                   rules_dir: RulesDirOpt = None) -> None:
    """Show one rule: condition, message, docs and references."""
    with handle_user_errors():
        typer.echo(rule_text(find_rule(load_rule_set(_strs(rules_dir)), rule)), nl=False)


@rules_app.command("check")
def rules_check_cmd(directory: Annotated[Path, typer.Argument(help="Directory of rule files.")]
                    ) -> None:
    """Check a directory of rule files against the schema, the facts and the built-in rules."""
    with handle_user_errors():
        extra = load_rule_set([str(directory)], builtin=False)
        if not directory.resolve().is_relative_to(builtin_rules_dir().resolve()):
            load_rule_set([str(directory)])  # codes and names must not clash with built-ins
        typer.echo(f"{directory}: {len(extra)} rule(s) OK")


@rules_app.command("docs")
def rules_docs_cmd(output: Annotated[str, typer.Option("-o", "--output", help="File; '-' is "
                                                       "stdout.")] = "-") -> None:
    """Write the rules reference (docs/rules.md) generated from the rule files."""
    with handle_user_errors():
        write_output(output, render_rules_doc(load_rule_set()))


@rules_app.command("facts")
def rules_facts_cmd(output: Annotated[str, typer.Option("-o", "--output", help="File; '-' is "
                                                        "stdout.")] = "-") -> None:
    """Write the facts reference (docs/facts.md): every fact rules may read, with its unit."""
    with handle_user_errors():
        write_output(output, render_facts_doc())


catalog_app = typer.Typer(help="List and show storage options and GPU instances.",
                          no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")


class CatalogKind(str, Enum):
    """The catalogs `catalog list` can show."""

    storage = "storage"
    instances = "instances"


@catalog_app.command("list")
def catalog_list_cmd(
    kind: Annotated[CatalogKind, typer.Argument(help="Which catalog.")] = CatalogKind.storage,
    catalog: CatalogOpt = None,
) -> None:
    """List a catalog's entries with their key figures."""
    with handle_user_errors():
        inputs = load_advisor_inputs(catalog_files=_strs(catalog))
        typer.echo(storage_table(inputs.storage) if kind is CatalogKind.storage
                   else instances_table(inputs.instances), nl=False)


@catalog_app.command("show")
def catalog_show_cmd(name: Annotated[str, typer.Argument(help="Storage or instance name.")],
                     catalog: CatalogOpt = None) -> None:
    """Show one entry in full, with its sources."""
    with handle_user_errors():
        inputs = load_advisor_inputs(catalog_files=_strs(catalog))
        if name in inputs.instances or any(name.lower() in (a.lower() for a in s.aliases)
                                           for s in inputs.instances.values()):
            typer.echo(entry_text(find_instance(inputs.instances, name)), nl=False)
        else:
            typer.echo(entry_text(find_storage(inputs.storage, name)), nl=False)


class FailOn(str, Enum):
    """Lowest finding severity that makes `review` exit 1."""

    warning = "warning"
    error = "error"


def _review_renderer(target: str) -> ReviewMarkdownRenderer | ReviewTextRenderer:
    suffix = Path(target).suffix.lower() if target != "-" else ".md"
    renderers = {".md": ReviewMarkdownRenderer, ".txt": ReviewTextRenderer}
    if suffix not in renderers:
        raise ConfigError(f"cannot tell the review format from '{target}': use .md or .txt "
                          "(and --junit FILE.xml for JUnit)")
    return renderers[suffix]()


@app.command("review")
def review_cmd(
    trace: TraceArg,
    plan: Annotated[
        list[Path], typer.Option("--plan", help="Deployment plan (YAML). Repeat to compare.")
    ],
    fail_on: Annotated[
        FailOn, typer.Option("--fail-on", help="Exit 1 when a finding is at least this severe.")
    ] = FailOn.error,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Write JUnit XML: one test case per check.")
    ] = None,
    output: Annotated[
        list[str] | None,
        typer.Option("-o", "--output", help="Review file (.md: PR comment, .txt); '-' is stdout."),
    ] = None,
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
    warmup_fraction: Annotated[
        float, typer.Option(help="Share of requests treated as cache warm-up.", min=0.0, max=0.99)
    ] = 0.5,
    window: Annotated[
        float, typer.Option("--window", help="Demand window, seconds.", min=0.001)
    ] = 1.0,
    catalog: CatalogOpt = None,
) -> None:
    """Check deployment plans against a trace; exit 1 on findings at --fail-on or above."""
    with handle_user_errors():
        renderers = [(o, _review_renderer(o)) for o in (output or [])]
        catalogs = plan_catalogs(catalog)
        plans = [load_plan(p, catalogs) for p in plan]
        report = review_trace(_read(trace, trace_format, maps, block_tokens), plans,
                              version=__version__,
                              generated_at=_now(), warmup_fraction=warmup_fraction,
                              window_s=window)
        if junit is not None:
            write_output(str(junit), JUnitRenderer().render(report))
        for target, renderer in renderers:
            write_output(target, renderer.render(report))
        if not any(o == "-" for o in (output or [])):
            typer.echo(ReviewTextRenderer().render(report), nl=False)
    if report.fails(fail_on.value):
        raise typer.Exit(EXIT_FINDINGS)


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
