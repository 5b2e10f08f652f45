"""The public Python API: read a trace, analyse it, review plans; what the CLI calls too.

Every function here takes what a user has (paths, option values as the command line spells
them) and returns a result model with its renderings. docs/api.md documents it with an example
that runs as a test.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar

from kvadvisor import __version__
from kvadvisor.advice.inputs import AdvisorInputs, load_rule_set
from kvadvisor.advice.robust import parse_headroom
from kvadvisor.cache.tiers import CacheTierSpec, parse_tier
from kvadvisor.errors import ConfigError
from kvadvisor.execute import open_executor
from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline import analyze as analyze_source
from kvadvisor.pipeline import review as review_source
from kvadvisor.pipeline.analyze import Steps
from kvadvisor.pipeline.replay import (
    STEP_COLUMNS,
    ReplayOptions,
    StepSource,
    parse_slo,
    replay_plan,
)
from kvadvisor.pipeline.streaming import parse_memory_limit
from kvadvisor.pipeline.verify import verify as verify_source
from kvadvisor.plan import Plan, PlanCatalogs
from kvadvisor.plan import load_plan as load_plan_file
from kvadvisor.report import notebook, plots
from kvadvisor.report.console import ConsoleRenderer
from kvadvisor.report.html import HtmlRenderer
from kvadvisor.report.html.replay import ReplayHtmlRenderer
from kvadvisor.report.jsonreport import JsonRenderer
from kvadvisor.report.junit import JUnitRenderer
from kvadvisor.report.markdown import MarkdownRenderer
from kvadvisor.report.replayjson import ReplayJsonRenderer
from kvadvisor.report.replaytext import ReplayTextRenderer
from kvadvisor.report.review_markdown import ReviewMarkdownRenderer, ReviewTextRenderer
from kvadvisor.report.serieslabels import with_series_labels
from kvadvisor.results.replay import ReplayReport
from kvadvisor.results.report import AdviceReport
from kvadvisor.results.review import ReviewCheck, ReviewReport
from kvadvisor.results.verdict import VerdictSet
from kvadvisor.rules import Rule
from kvadvisor.trace import Trace, TraceFormat, read_trace
from kvadvisor.trace.formats import ColumnMap
from kvadvisor.trace.source import file_sha256
from kvadvisor.verifyjobs import VerifyOptions, VerifyReport, VerifySet
from kvadvisor.verifyjobs.gate import (
    GateReport,
    GateVerdict,
    gate_json,
    judge_gate,
    parse_gate,
    render_gate,
)
from kvadvisor.verifyjobs.loader import load_folder, storage_entries
from kvadvisor.verifyjobs.render import render_catalog, render_json, render_text
from kvadvisor.verifyjobs.results import DEFAULT_TOLERANCE, attach, fails, review_checks
from kvadvisor.verifyjobs.results import verify_results as judge_folder

if TYPE_CHECKING:  # pandas and matplotlib load when a table or a chart is asked for
    import pandas as pd
    from matplotlib.figure import Figure

PathLike = str | os.PathLike[str]


def utc_now() -> str:
    """The report's clock: now in UTC, to the second, ISO 8601 (an input to the pure core)."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclasses.dataclass(frozen=True)
class Report(AdviceReport):
    """The analysis report, with its renderings.

    It has every field of :class:`~kvadvisor.results.report.AdviceReport`; each rendering is one
    call, and ``to_dict`` gives the JSON contract as plain values.
    """

    # The charts ``plot`` draws, by name (docs/api.md says what each answers).
    PLOT_NAMES: ClassVar[tuple[str, ...]] = tuple(plots.PLOTS)

    @classmethod
    def of(cls, report: AdviceReport) -> Report:
        """The same report, with its renderings."""
        return cls(**{f.name: getattr(report, f.name) for f in dataclasses.fields(AdviceReport)})

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract as plain values: each chart series with its name and axis labels."""
        return dict(with_series_labels(super().to_dict()))

    def to_json(self) -> str:
        """The JSON report (docs/reports.md: the public contract)."""
        return JsonRenderer().render(self)

    def to_html(self) -> str:
        """The HTML report: one self-contained file."""
        return HtmlRenderer().render(self)

    def to_markdown(self) -> str:
        """The Markdown report (a pull-request comment)."""
        return MarkdownRenderer().render(self)

    def to_text(self, width: int = 100) -> str:
        """The terminal summary at ``width`` columns."""
        return ConsoleRenderer(width).render(self)

    def __repr__(self) -> str:
        """A few lines: the trace, the headline, the margin and targets, the findings."""
        return notebook.text(notebook.report_view(self))

    def _repr_html_(self) -> str:
        """Jupyter's rich display: those lines and the key numbers as a compact table."""
        return notebook.html(notebook.report_view(self))

    @property
    def verdict(self) -> Verdicts | None:
        """Every provider's deployment verdict, with a short display (None: no search ran)."""
        rec = self.recommendation
        return None if rec is None or rec.verdict is None else Verdicts.of(rec.verdict)

    def requests(self) -> pd.DataFrame:
        """One row per trace request, in trace order (docs/api.md lists the columns).

        The trace's ``request``, ``arrival_s``, ``input_tokens`` and ``output_tokens``; when
        the recommended deployment was replayed, the replay's columns too (``ttft_s``,
        ``tpot_s``, ``queue_s``, ``hit_tokens``, ... as ``replay --requests-out`` writes them).
        """
        if not self.request_rows:
            raise ConfigError(
                "this report holds no per-request rows: the trace was streamed and its verdict "
                "not replayed, or the report was read back from JSON; "
                "kvadvisor.read_trace(path).to_pandas() gives the trace's own columns"
            )
        import pandas as pd

        return pd.DataFrame(dict(self.request_rows))

    def plot(self, name: str) -> Figure:
        """The chart ``name`` as a matplotlib Figure; ``Report.PLOT_NAMES`` lists them.

        A name that is not a chart is a ValueError (a ConfigError) with the closest name; a
        chart whose data the report lacks says why.
        """
        return plots.plot(self, name)


@dataclasses.dataclass(frozen=True)
class Verdicts(VerdictSet):
    """Every provider's deployment verdict (``report.verdict``), with a short display.

    It has every field of :class:`~kvadvisor.results.verdict.VerdictSet`.
    """

    @classmethod
    def of(cls, verdicts: VerdictSet) -> Verdicts:
        """The same verdicts, with their display."""
        return cls(**{f.name: getattr(verdicts, f.name) for f in dataclasses.fields(VerdictSet)})

    def __repr__(self) -> str:
        """The targets, the primary pick (or why none), in a few lines."""
        return notebook.text(notebook.verdict_view(self))

    def _repr_html_(self) -> str:
        """Jupyter's rich display: those lines and one row per provider."""
        return notebook.html(notebook.verdict_view(self))


@dataclasses.dataclass(frozen=True)
class Review(ReviewReport):
    """Plans reviewed against a trace, with their renderings.

    It has every field of :class:`~kvadvisor.results.review.ReviewReport`;
    ``fails("warning")`` says whether a finding reaches that severity, as `--fail-on` does.
    """

    @classmethod
    def of(cls, review: ReviewReport) -> Review:
        """The same review, with its renderings."""
        return cls(**{f.name: getattr(review, f.name) for f in dataclasses.fields(ReviewReport)})

    def to_markdown(self) -> str:
        """The review as a pull-request comment."""
        return ReviewMarkdownRenderer().render(self)

    def to_text(self) -> str:
        """The review as plain text (what `kvadvisor review` prints)."""
        return ReviewTextRenderer().render(self)

    def to_junit(self) -> str:
        """JUnit XML: one test case per check, for CI."""
        return JUnitRenderer().render(self)


@dataclasses.dataclass(frozen=True)
class Replay(ReplayReport):
    """A trace replayed through a plan's deployment, with its renderings and per-request rows.

    It has every field of :class:`~kvadvisor.results.replay.ReplayReport`; ``request_rows``
    holds one array per column of ``--requests-out`` (docs/replay.md), one value per trace
    request; ``requests()`` gives them as a DataFrame.
    """

    request_rows: Mapping[str, Any] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )
    steps: StepSource | None = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def of(
        cls, report: ReplayReport, rows: Mapping[str, Any], steps: StepSource | None = None
    ) -> Replay:
        """The same replay, with its renderings, rows and (when kept) its step log."""
        fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(ReplayReport)}
        return cls(**fields, request_rows=dict(rows), steps=steps)

    def __repr__(self) -> str:
        """A few lines: what ran, how many finished, TTFT and TPOT, the SLO."""
        return notebook.text(notebook.replay_view(self))

    def _repr_html_(self) -> str:
        """Jupyter's rich display: those lines and the stages as a compact table."""
        return notebook.html(notebook.replay_view(self))

    def requests(self) -> pd.DataFrame:
        """One row per trace request, in trace order: the columns of ``--requests-out``."""
        import pandas as pd

        return pd.DataFrame(dict(self.request_rows))

    def to_json(self) -> str:
        """The replay document as JSON."""
        return ReplayJsonRenderer().render(self)

    def to_html(self) -> str:
        """The replay page: one self-contained file."""
        return ReplayHtmlRenderer().render(self)

    def to_text(self) -> str:
        """The terminal summary (what `kvadvisor replay` prints)."""
        return ReplayTextRenderer().render(self)

    def requests_table(self) -> Any:
        """The per-request rows as a pyarrow Table (what ``--requests-out`` writes)."""
        import pyarrow as pa

        return pa.table(dict(self.request_rows))

    def step_schema(self) -> Any:
        """The step log's pyarrow schema (docs/replay.md, "Outputs")."""
        import pyarrow as pa

        ints = {"replica", "prefill_tokens", "decode_sequences", "kv_tokens"}
        ints |= {"loads_in_flight", "preemptions"}
        return pa.schema(
            [
                (c, pa.string() if c == "stage" else pa.int64() if c in ints else pa.float64())
                for c in STEP_COLUMNS
            ]
        )

    def step_batches(self) -> Iterator[Any]:
        """The step log as pyarrow RecordBatches (what ``--steps-out`` writes), a batch at a time.

        Empty unless the replay was asked for it (``replay(..., step_log=True)``).
        """
        import pyarrow as pa

        schema = self.step_schema()
        for batch in self.steps() if self.steps is not None else ():
            yield pa.RecordBatch.from_pydict(batch, schema=schema)


@dataclasses.dataclass(frozen=True)
class Verification(VerifyReport):
    """A verify folder's results judged (``verify --results``), with their renderings.

    It has every field of :class:`~kvadvisor.verifyjobs.model.VerifyReport`; ``catalog`` is the
    measured storage catalog (None when nothing was measured).
    """

    @classmethod
    def of(cls, report: VerifyReport) -> Verification:
        """The same report, with its renderings."""
        return cls(**{f.name: getattr(report, f.name) for f in dataclasses.fields(VerifyReport)})

    def to_text(self, catalog_path: str | None = None) -> str:
        """The terminal summary (``catalog_path``: where the measured catalog was written)."""
        return render_text(self, catalog_path)

    def to_json(self, generated_at: str | None = None) -> str:
        """Every verdict with its figures, as JSON."""
        return render_json(self, generated_at or utc_now(), __version__)

    def catalog_yaml(self) -> str | None:
        """The measured storage catalog as YAML for ``--catalog`` (None: nothing measured)."""
        return None if self.catalog is None else render_catalog(self.catalog)

    def fails(self, fail_on: str) -> bool:
        """Whether a failed check reaches ``fail_on`` (warning or error), as `--fail-on`."""
        return fails(self, fail_on)

    def checks(self) -> tuple[ReviewCheck, ...]:
        """The verdicts as review checks (VF01-VF03)."""
        return review_checks(self)


# The analysis settings' defaults are AnalyzeOptions' own, so a keyword cannot drift from its field.
_SETTINGS = AnalyzeOptions()


def _strs(paths: Sequence[PathLike]) -> tuple[str, ...]:
    return tuple(os.fspath(p) for p in paths)


def _names(value: str | Sequence[str]) -> tuple[str, ...]:
    """One name or several: a lone string is one name, not its characters."""
    return (value,) if isinstance(value, str) else tuple(value)


class Advisor:
    """Rules and catalogs loaded once, and the calls that read them: analyze, review, replay.

    It holds its configuration as coverage.py's ``Coverage`` does: ``rules`` (directories, on
    top of the built-in rules), ``select``/``ignore`` (codes, names or groups) and ``catalogs``
    (files of any kind, layered on the packaged catalogs) are given once; each is loaded on its
    first use and kept, so a notebook's tenth analysis parses no YAML again. The module-level
    functions (``kvadvisor.analyze``, ...) call :func:`default_advisor`, or an Advisor of their
    own when a call names rules or catalogs.
    """

    def __init__(
        self,
        *,
        rules: Sequence[PathLike] = (),
        select: Sequence[str] = (),
        ignore: Sequence[str] = (),
        catalogs: Sequence[PathLike] = (),
    ) -> None:
        self.rule_dirs = _strs(rules)
        self.select = _names(select)
        self.ignore = _names(ignore)
        self.catalog_files = _strs(catalogs)

    def __repr__(self) -> str:
        """What it was given (what it loaded shows through ``rule_set`` and ``catalog_set``)."""
        given = ", ".join(
            f"{name}={value!r}"
            for name, value in (
                ("rules", self.rule_dirs),
                ("select", self.select),
                ("ignore", self.ignore),
                ("catalogs", self.catalog_files),
            )
            if value
        )
        return f"Advisor({given})"

    @functools.cached_property
    def rule_set(self) -> tuple[Rule, ...]:
        """The built-in rules plus the directories', checked against the facts, then selected."""
        return load_rule_set(self.rule_dirs, self.select, self.ignore)

    @functools.cached_property
    def catalog_set(self) -> PlanCatalogs:
        """The packaged catalogs with the files layered on (routed by their ``kind``)."""
        return PlanCatalogs.packaged(self.catalog_files)

    @functools.cached_property
    def inputs(self) -> AdvisorInputs:
        """What the advisor reads besides the trace: the rule set and the catalogs."""
        cats = self.catalog_set
        # Plain dicts, as load_advisor_inputs gave them: the packaged catalogs are read-only
        # views shared by every Advisor, the advisor's inputs a copy of its own.
        return AdvisorInputs(self.rule_set, dict(cats.storage), dict(cats.instances), cats.perf)

    def load_plan(self, path: PathLike, *, allow_outside_plan_dir: bool = False) -> Plan:
        """Load and check a deployment plan against this advisor's catalogs."""
        return load_plan_file(
            os.fspath(path), self.catalog_set, allow_outside_plan_dir=allow_outside_plan_dir
        )

    def _plans(
        self, plans: Sequence[PathLike | Plan], allow_outside_plan_dir: bool
    ) -> tuple[Plan, ...]:
        return tuple(
            p
            if isinstance(p, Plan)
            else self.load_plan(p, allow_outside_plan_dir=allow_outside_plan_dir)
            for p in plans
        )

    def analyze(
        self,
        trace: PathLike | Trace,
        *,
        plans: Sequence[PathLike | Plan] = (),
        allow_outside_plan_dir: bool = False,
        memory_limit: int | str | None = None,
        trace_format: str | TraceFormat | None = None,
        column_map: ColumnMap = None,
        block_tokens: int | None = None,
        generated_at: str | None = None,
        progress: Steps | None = None,
        since_s: float | None = None,
        until_s: float | None = None,
        workers: int = 1,
        scheduler: str | None = None,
        # The analysis settings: AnalyzeOptions' fields, by name, with its defaults.
        model: str | None = _SETTINGS.model,
        gpu: str | None = _SETTINGS.gpu,
        kv_dtype: str = _SETTINGS.kv_dtype,
        weight_dtype: str | None = _SETTINGS.weight_dtype,
        tp: int | None = _SETTINGS.tp,
        ep: int = _SETTINGS.ep,
        window_s: float = _SETTINGS.window_s,
        chunk_tokens: int = _SETTINGS.chunk_tokens,
        io_unit_bytes: int = _SETTINGS.io_unit_bytes,
        drive_capacity_bytes: float | None = _SETTINGS.drive_capacity_bytes,
        iterations: int = _SETTINGS.iterations,
        instances: int = _SETTINGS.instances,
        warmup_fraction: float = _SETTINGS.warmup_fraction,
        cache_tiers: Sequence[str | CacheTierSpec] = _SETTINGS.cache_tiers,
        cache_instances: int = _SETTINGS.cache_instances,
        cache_routing_seed: int = _SETTINGS.cache_routing_seed,
        cache_chunk_tokens: int | None = _SETTINGS.cache_chunk_tokens,
        cache_save_unfull_chunk: bool = _SETTINGS.cache_save_unfull_chunk,
        cache_sample_rate: float | None = _SETTINGS.cache_sample_rate,
        storage: str | None = _SETTINGS.storage,
        instance: str | Sequence[str] = _SETTINGS.instance,
        providers: str | Sequence[str] = _SETTINGS.providers,
        slo: str | None = _SETTINGS.slo,
        headroom: float | str = _SETTINGS.headroom,
        spare: bool = _SETTINGS.spare,
        price_kind: str = _SETTINGS.price_kind,
        over_context: str = _SETTINGS.over_context,
        engine: str | None = _SETTINGS.engine,
        replay: bool = _SETTINGS.replay,
        replay_max_requests: int = _SETTINGS.replay_max_requests,
        search: bool = _SETTINGS.search,
    ) -> Report:
        """Measure a trace and advise a configuration per stage: `kvadvisor analyze` as a call.

        ``trace`` is a path (read whole, or streamed within ``memory_limit`` when it is
        canonical parquet: bytes, or text such as "8GiB" or "50%"), an ``s3://``, ``gs://`` or
        ``az://`` URI of canonical parquet (streamed; credentials from the environment and
        profiles only) or a Trace. ``since_s``/``until_s`` keep canonical parquet's requests
        arriving in that range (seconds, on ``arrival_s`` as stored). ``plans`` (files or
        loaded plans) are reviewed against the trace, their engine files read from each plan's
        folder only unless ``allow_outside_plan_dir``. ``generated_at`` is the report's clock
        (default: now, UTC). ``workers`` > 1 runs the deployment search on a local Dask
        cluster of that many processes, ``scheduler`` (e.g. "tcp://host:8786") on an existing
        one (docs/scale.md); the report is the same as in one process. The rest are the
        analysis settings, :class:`AnalyzeOptions`' fields (docs/api.md lists them):
        ``cache_tiers`` as ``"hbm=1M"`` text or TierSpecs, ``headroom`` as 0.1 or "10%",
        ``instance`` and ``providers`` as one name or several; ``search`` False: no verdict.
        """
        # Parsed first: a bad value is an error even where the trace is read whole.
        limit = parse_memory_limit(memory_limit) if isinstance(memory_limit, str) else memory_limit
        chosen = AnalyzeOptions(
            model=model,
            gpu=gpu,
            kv_dtype=kv_dtype,
            weight_dtype=weight_dtype,
            tp=tp,
            ep=ep,
            window_s=window_s,
            chunk_tokens=chunk_tokens,
            io_unit_bytes=io_unit_bytes,
            drive_capacity_bytes=drive_capacity_bytes,
            iterations=iterations,
            instances=instances,
            warmup_fraction=warmup_fraction,
            cache_tiers=tuple(
                t if isinstance(t, CacheTierSpec) else parse_tier(t) for t in cache_tiers
            ),
            cache_instances=cache_instances,
            cache_routing_seed=cache_routing_seed,
            cache_chunk_tokens=cache_chunk_tokens,
            cache_save_unfull_chunk=cache_save_unfull_chunk,
            cache_sample_rate=cache_sample_rate,
            storage=storage,
            instance=_names(instance),
            advisor_inputs=self.inputs,
            providers=_names(providers),
            slo=slo,
            headroom=parse_headroom(headroom),
            spare=spare,
            price_kind=price_kind,
            over_context=over_context,
            engine=engine,
            plans=self._plans(plans, allow_outside_plan_dir),
            replay=replay,
            replay_max_requests=replay_max_requests,
            search=search,
        )
        # Before the trace is read: a missing extra or an unreachable scheduler fails at once.
        with open_executor(workers, scheduler) as executor:
            report = analyze_source(
                trace if isinstance(trace, Trace) else os.fspath(trace),
                dataclasses.replace(chosen, executor=executor),
                version=__version__,
                generated_at=generated_at or utc_now(),
                trace_format=trace_format,
                column_map=column_map,
                block_tokens=block_tokens,
                memory_limit_bytes=limit,
                progress=progress,
                since_s=since_s,
                until_s=until_s,
            )
        return Report.of(report)

    def review(
        self,
        trace: PathLike | Trace,
        plans: Sequence[PathLike | Plan],
        *,
        warmup_fraction: float = 0.5,
        window_s: float = 1.0,
        trace_format: str | TraceFormat | None = None,
        column_map: ColumnMap = None,
        block_tokens: int | None = None,
        generated_at: str | None = None,
        results: PathLike | None = None,
        allow_outside_plan_dir: bool = False,
    ) -> Review:
        """Check deployment plans against a trace: `kvadvisor review` as a call.

        ``plans`` are plan files (checked against this advisor's catalogs) or loaded plans; the
        trace (a path or a Trace) is replayed once for all of them. ``results``: a `verify`
        folder whose measured checks join the review of the plan it was written for. The
        review runs this advisor's plan, stage, tier and engine rules. A plan's engine files
        are read from its folder only, unless ``allow_outside_plan_dir`` (docs/security.md).
        """
        rule_set = self.rule_set
        loaded = self._plans(plans, allow_outside_plan_dir)
        # Read first: a folder that does not match is an error before the replay runs.
        measured = (
            None
            if results is None
            else verify_results(results, catalogs=self.catalog_files, generated_at=generated_at)
        )
        report = review_source(
            trace if isinstance(trace, Trace) else os.fspath(trace),
            loaded,
            version=__version__,
            generated_at=generated_at or utc_now(),
            trace_format=trace_format,
            column_map=column_map,
            block_tokens=block_tokens,
            warmup_fraction=warmup_fraction,
            window_s=window_s,
            rules=rule_set,
        )
        if measured is not None:
            sha = None if isinstance(trace, Trace) else file_sha256(os.fspath(trace))
            report = attach(report, measured, sha)
        return Review.of(report)

    def replay(
        self,
        trace: PathLike | Trace,
        plan: PathLike | Plan,
        *,
        slo: str | Mapping[str, float] | None = None,
        window_s: float = 1.0,
        drain_cap_s: float | None = None,
        trace_format: str | TraceFormat | None = None,
        column_map: ColumnMap = None,
        block_tokens: int | None = None,
        generated_at: str | None = None,
        allow_outside_plan_dir: bool = False,
        step_log: bool = False,
        slice_s: float | None = None,
        slice_warmup_s: float = 0.0,
        workers: int = 1,
        scheduler: str | None = None,
    ) -> Replay:
        """Replay a trace through a plan's deployment: `kvadvisor replay` as a call.

        ``slo`` adds targets to the plan's, as ``"ttft_p90=2s,tpot_p90=50ms"`` or a mapping of
        ``ttft_p90_s`` to seconds; ``window_s`` is the demand window; ``drain_cap_s`` how long
        the replay runs past the last arrival (default: the trace's span, at least ten
        minutes); ``step_log`` keeps every step (``Replay.step_batches``, the busiest minute's
        chart). ``slice_s`` replays the trace in independent time slices, each after a warm-up
        of ``slice_warmup_s`` (docs/replay.md); ``workers``/``scheduler`` run the replica groups
        (or the slices) on a Dask cluster, as `analyze` runs its search (docs/scale.md).
        """
        (loaded,) = self._plans([plan], allow_outside_plan_dir)
        targets = parse_slo(slo) if isinstance(slo, str) else dict(slo or {})
        options = ReplayOptions(
            window_s=window_s,
            drain_cap_s=drain_cap_s,
            step_log=step_log,
            slice_s=slice_s,
            slice_warmup_s=slice_warmup_s,
        )
        # Before the trace is read: a missing extra or an unreachable scheduler fails at once.
        with open_executor(workers, scheduler) as executor:
            if not isinstance(trace, Trace):
                trace = read_trace(
                    os.fspath(trace),
                    trace_format,
                    column_map=column_map,
                    block_tokens=block_tokens,
                )
            report, rows, steps = replay_plan(
                trace,
                loaded,
                version=__version__,
                generated_at=generated_at or utc_now(),
                slo=targets,
                options=options,
                executor=executor,
            )
        return Replay.of(report, rows, steps)

    def verify(
        self,
        trace: PathLike | Trace,
        plan: PathLike | Plan,
        *,
        window_s: float = 1.0,
        warmup_fraction: float = 0.5,
        bench_instances: int | None = None,
        bench_requests: int | None = None,
        trace_format: str | TraceFormat | None = None,
        column_map: ColumnMap = None,
        block_tokens: int | None = None,
        allow_outside_plan_dir: bool = False,
    ) -> VerifySet:
        """The fio and serving-benchmark jobs that test ``plan`` on real hardware (docs/verify.md).

        Writes nothing: ``files`` maps each relative path of the folder to its text (``kvadvisor
        verify TRACE --plan PLAN -o DIR`` writes them under DIR).
        """
        (loaded,) = self._plans([plan], allow_outside_plan_dir)
        return verify_source(
            trace if isinstance(trace, Trace) else os.fspath(trace),
            loaded,
            self.catalog_set.storage,
            VerifyOptions(window_s, warmup_fraction, bench_instances, bench_requests),
            version=__version__,
            trace_sha256=None if isinstance(trace, Trace) else file_sha256(os.fspath(trace)),
            trace_format=trace_format,
            column_map=column_map,
            block_tokens=block_tokens,
        )


@functools.lru_cache(maxsize=1)
def default_advisor() -> Advisor:
    """The built-in rules and the packaged catalogs, loaded once per process."""
    return Advisor()


def _advisor(
    rules: Sequence[PathLike] = (),
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    catalogs: Sequence[PathLike] = (),
) -> Advisor:
    """The default advisor, or one of its own for a call that names rules or catalogs."""
    if rules or select or ignore or catalogs:
        return Advisor(rules=rules, select=select, ignore=ignore, catalogs=catalogs)
    return default_advisor()


def load_plan(path: PathLike, *, catalogs: Sequence[PathLike] = ()) -> Plan:
    """Load and check a deployment plan; ``catalogs`` are extra catalog files it may name."""
    return _advisor(catalogs=catalogs).load_plan(path)


def analyze(
    trace: PathLike | Trace,
    *,
    rules: Sequence[PathLike] = (),
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    catalogs: Sequence[PathLike] = (),
    plans: Sequence[PathLike | Plan] = (),
    allow_outside_plan_dir: bool = False,
    memory_limit: int | str | None = None,
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
    generated_at: str | None = None,
    progress: Steps | None = None,
    since_s: float | None = None,
    until_s: float | None = None,
    workers: int = 1,
    scheduler: str | None = None,
    model: str | None = _SETTINGS.model,
    gpu: str | None = _SETTINGS.gpu,
    kv_dtype: str = _SETTINGS.kv_dtype,
    weight_dtype: str | None = _SETTINGS.weight_dtype,
    tp: int | None = _SETTINGS.tp,
    ep: int = _SETTINGS.ep,
    window_s: float = _SETTINGS.window_s,
    chunk_tokens: int = _SETTINGS.chunk_tokens,
    io_unit_bytes: int = _SETTINGS.io_unit_bytes,
    drive_capacity_bytes: float | None = _SETTINGS.drive_capacity_bytes,
    iterations: int = _SETTINGS.iterations,
    instances: int = _SETTINGS.instances,
    warmup_fraction: float = _SETTINGS.warmup_fraction,
    cache_tiers: Sequence[str | CacheTierSpec] = _SETTINGS.cache_tiers,
    cache_instances: int = _SETTINGS.cache_instances,
    cache_routing_seed: int = _SETTINGS.cache_routing_seed,
    cache_chunk_tokens: int | None = _SETTINGS.cache_chunk_tokens,
    cache_save_unfull_chunk: bool = _SETTINGS.cache_save_unfull_chunk,
    cache_sample_rate: float | None = _SETTINGS.cache_sample_rate,
    storage: str | None = _SETTINGS.storage,
    instance: str | Sequence[str] = _SETTINGS.instance,
    providers: str | Sequence[str] = _SETTINGS.providers,
    slo: str | None = _SETTINGS.slo,
    headroom: float | str = _SETTINGS.headroom,
    spare: bool = _SETTINGS.spare,
    price_kind: str = _SETTINGS.price_kind,
    over_context: str = _SETTINGS.over_context,
    engine: str | None = _SETTINGS.engine,
    replay: bool = _SETTINGS.replay,
    replay_max_requests: int = _SETTINGS.replay_max_requests,
    search: bool = _SETTINGS.search,
) -> Report:
    """:meth:`Advisor.analyze` with the built-in rules and packaged catalogs, plus any given.

    ``rules`` (directories), ``select``/``ignore`` and ``catalogs`` (files) add to the built-in
    rules and catalogs, as :class:`Advisor` takes them; the rest is :meth:`Advisor.analyze`'s.
    """
    return _advisor(rules, select, ignore, catalogs).analyze(
        trace,
        plans=plans,
        allow_outside_plan_dir=allow_outside_plan_dir,
        memory_limit=memory_limit,
        trace_format=trace_format,
        column_map=column_map,
        block_tokens=block_tokens,
        generated_at=generated_at,
        progress=progress,
        since_s=since_s,
        until_s=until_s,
        workers=workers,
        scheduler=scheduler,
        model=model,
        gpu=gpu,
        kv_dtype=kv_dtype,
        weight_dtype=weight_dtype,
        tp=tp,
        ep=ep,
        window_s=window_s,
        chunk_tokens=chunk_tokens,
        io_unit_bytes=io_unit_bytes,
        drive_capacity_bytes=drive_capacity_bytes,
        iterations=iterations,
        instances=instances,
        warmup_fraction=warmup_fraction,
        cache_tiers=cache_tiers,
        cache_instances=cache_instances,
        cache_routing_seed=cache_routing_seed,
        cache_chunk_tokens=cache_chunk_tokens,
        cache_save_unfull_chunk=cache_save_unfull_chunk,
        cache_sample_rate=cache_sample_rate,
        storage=storage,
        instance=instance,
        providers=providers,
        slo=slo,
        headroom=headroom,
        spare=spare,
        price_kind=price_kind,
        over_context=over_context,
        engine=engine,
        replay=replay,
        replay_max_requests=replay_max_requests,
        search=search,
    )


def review(
    trace: PathLike | Trace,
    plans: Sequence[PathLike | Plan],
    *,
    catalogs: Sequence[PathLike] = (),
    warmup_fraction: float = 0.5,
    window_s: float = 1.0,
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
    generated_at: str | None = None,
    results: PathLike | None = None,
    rules: Sequence[PathLike] = (),
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    allow_outside_plan_dir: bool = False,
) -> Review:
    """:meth:`Advisor.review` with the built-in rules and packaged catalogs, plus any given."""
    return _advisor(rules, select, ignore, catalogs).review(
        trace,
        plans,
        warmup_fraction=warmup_fraction,
        window_s=window_s,
        trace_format=trace_format,
        column_map=column_map,
        block_tokens=block_tokens,
        generated_at=generated_at,
        results=results,
        allow_outside_plan_dir=allow_outside_plan_dir,
    )


def replay(
    trace: PathLike | Trace,
    plan: PathLike | Plan,
    *,
    slo: str | Mapping[str, float] | None = None,
    window_s: float = 1.0,
    drain_cap_s: float | None = None,
    catalogs: Sequence[PathLike] = (),
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
    generated_at: str | None = None,
    allow_outside_plan_dir: bool = False,
    step_log: bool = False,
    slice_s: float | None = None,
    slice_warmup_s: float = 0.0,
    workers: int = 1,
    scheduler: str | None = None,
) -> Replay:
    """:meth:`Advisor.replay` with the packaged catalogs, plus any ``catalogs`` files."""
    return _advisor(catalogs=catalogs).replay(
        trace,
        plan,
        slo=slo,
        window_s=window_s,
        drain_cap_s=drain_cap_s,
        trace_format=trace_format,
        column_map=column_map,
        block_tokens=block_tokens,
        generated_at=generated_at,
        allow_outside_plan_dir=allow_outside_plan_dir,
        step_log=step_log,
        slice_s=slice_s,
        slice_warmup_s=slice_warmup_s,
        workers=workers,
        scheduler=scheduler,
    )


def verify(
    trace: PathLike | Trace,
    plan: PathLike | Plan,
    *,
    catalogs: Sequence[PathLike] = (),
    window_s: float = 1.0,
    warmup_fraction: float = 0.5,
    bench_instances: int | None = None,
    bench_requests: int | None = None,
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
    allow_outside_plan_dir: bool = False,
) -> VerifySet:
    """:meth:`Advisor.verify` with the packaged catalogs, plus any ``catalogs`` files."""
    return _advisor(catalogs=catalogs).verify(
        trace,
        plan,
        window_s=window_s,
        warmup_fraction=warmup_fraction,
        bench_instances=bench_instances,
        bench_requests=bench_requests,
        trace_format=trace_format,
        column_map=column_map,
        block_tokens=block_tokens,
        allow_outside_plan_dir=allow_outside_plan_dir,
    )


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two verify folders' results, a baseline and a candidate run, and the A/B gate.

    ``gate`` holds every serving metric of each engine benchmarked in both, its change and,
    for the metrics given in ``gate=``, the verdict (docs/verify.md, "The A/B gate").
    """

    baseline: Verification
    candidate: Verification
    gate: GateReport

    @property
    def failed(self) -> tuple[GateVerdict, ...]:
        """The gated metrics that missed their stated change."""
        return self.gate.failed

    def fails(self, fail_on: str) -> bool:
        """A gate missed, or a candidate check failed at ``fail_on`` or above."""
        return bool(self.gate.failed) or self.candidate.fails(fail_on)

    def to_text(self) -> str:
        """Both runs' summaries, then measured against replayed and each change."""
        return (
            "baseline: "
            + self.baseline.to_text()
            + "candidate: "
            + self.candidate.to_text()
            + render_gate(self.gate, self.baseline, self.candidate)
        )

    def to_json(self, generated_at: str | None = None) -> str:
        """The verdicts and both judged runs, as JSON."""
        when = generated_at or utc_now()
        return gate_json(
            self.gate,
            json.loads(self.baseline.to_json(when)),
            json.loads(self.candidate.to_json(when)),
            when,
            __version__,
        )


def verify_compare(
    baseline: PathLike,
    candidate: PathLike,
    *,
    gate: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    catalogs: Sequence[PathLike] = (),
    generated_at: str | None = None,
) -> Comparison:
    """Two verify folders judged and compared (`verify --results A --results B --gate ...`).

    ``gate``: ``ttft_p99=-25%,throughput=+29%`` style changes the candidate must reach
    (a ConfigError when malformed); None compares without gating.
    """
    rules = parse_gate(gate) if gate is not None else ()
    runs = [
        verify_results(f, tolerance=tolerance, catalogs=catalogs, generated_at=generated_at)
        for f in (baseline, candidate)
    ]
    return Comparison(runs[0], runs[1], judge_gate(runs[0], runs[1], rules))


def verify_results(
    folder: PathLike,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    catalogs: Sequence[PathLike] = (),
    generated_at: str | None = None,
) -> Verification:
    """Read a verify folder's fio and benchmark results back and judge them (`--results`).

    ``catalogs``: storage catalog files the plan's tiers were named from besides the packaged
    one (the measured catalog keeps their entries' other fields).
    """
    loaded = load_folder(os.fspath(folder))
    base = storage_entries(tuple(str(c) for c in catalogs))
    report = judge_folder(loaded, generated_at or utc_now(), tolerance, base)
    return Verification.of(report)
