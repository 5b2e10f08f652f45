"""The analysis pipeline: trace -> measurements -> AdviceReport (pure; no file I/O)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow.compute as pc

from kvadvisor.advise.advisor import AdvisorOptions, advise_report, parse_instance_choice
from kvadvisor.advise.cache_section import prefix_cache_section, simulate_section_cache
from kvadvisor.advise.inputs import AdvisorInputs, load_advisor_inputs
from kvadvisor.advise.model import FORMAT_VERSION, AdviceReport, Meta, Series, TraceSummary
from kvadvisor.advise.profile import ProfileOptions, StageProfile, profile_workload
from kvadvisor.advise.review import review_plans
from kvadvisor.cache import PrefixCacheResult
from kvadvisor.cache.tiers import TierSpec
from kvadvisor.metrics import trace_hit_tokens
from kvadvisor.plan.model import Plan
from kvadvisor.trace.describe import capabilities
from kvadvisor.trace.model import Trace
from kvadvisor.trace.stream import TraceStream


@dataclass(frozen=True)
class AnalyzeOptions(ProfileOptions):
    """Every analysis knob, with defaults; the CLI fills it from options and config.

    The stage profiler's knobs (model, GPU, dtypes, TP, window, chunk size, ...) are inherited
    from ProfileOptions (docs/stage-profiler.md), so they are declared once.
    """

    warmup_fraction: float = 0.5
    # Prefix cache (docs/cache.md): inclusive tiers fastest first, routing comparison over this
    # many instances (<= 1: off), engine chunk size to coarsen hashes to, SHARDS rate (None:
    # exact unless the trace is huge).
    cache_tiers: tuple[TierSpec, ...] = ()
    cache_instances: int = 8
    cache_routing_seed: int = 0
    cache_chunk_tokens: int | None = None
    cache_save_unfull_chunk: bool = False
    cache_sample_rate: float | None = None
    # Advisor: one storage spec for both stages, instances ("NAME" or "prefill=NAME"), and the
    # loaded rules and catalogs (None: the built-in ones).
    storage: str | None = None
    instance: tuple[str, ...] = ()
    advisor_inputs: AdvisorInputs | None = None
    # Deployment plans to review against the trace (docs/review.md).
    plans: tuple[Plan, ...] = ()

    def profile_options(self) -> ProfileOptions:
        """The stage profiler's slice of the options."""
        return ProfileOptions(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(ProfileOptions)}
        )


# Candidate arrival-chart windows (s): the smallest that keeps the chart under MAX_ARRIVAL_BINS.
ARRIVAL_WINDOWS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
MAX_ARRIVAL_BINS = 240


def arrival_window_s(duration_s: float) -> int:
    """The smallest of ``ARRIVAL_WINDOWS_S`` giving at most ``MAX_ARRIVAL_BINS`` windows."""
    return next(
        (w for w in ARRIVAL_WINDOWS_S if duration_s / w < MAX_ARRIVAL_BINS), ARRIVAL_WINDOWS_S[-1]
    )


def arrival_counts(arrival_s: np.ndarray, duration_s: float, window_s: int) -> np.ndarray:
    """Requests per window of ``window_s`` from 0 to ``duration_s`` (later arrivals in the last)."""
    bins = int(duration_s // window_s) + 1
    idx = np.minimum((arrival_s // window_s).astype(np.int64), bins - 1)
    return np.bincount(idx, minlength=bins)


def arrival_chart(counts: np.ndarray, window_s: int) -> Series:
    """The arrivals chart from per-window request counts: x each window's start, y requests/s."""
    return Series(
        name=f"arrivals per {window_s} s window",
        x_label="time since first request",
        x_unit="s",
        y_label="arrival rate",
        y_unit="requests/s",
        x=tuple(float(v) for v in np.arange(counts.size) * window_s),
        y=tuple(float(v) for v in counts / window_s),
        kind="step",
    )


def arrival_series(arrival_s: np.ndarray, duration_s: float) -> Series | None:
    """Requests per second in fixed windows from the first arrival (None for an empty trace).

    The window is the smallest of ``ARRIVAL_WINDOWS_S`` giving at most ``MAX_ARRIVAL_BINS``
    windows; x is each window's start (s), y its request count divided by the window length.
    """
    if arrival_s.size == 0:
        return None
    window_s = arrival_window_s(duration_s)
    return arrival_chart(arrival_counts(arrival_s, duration_s, window_s), window_s)


def log2_bin(tokens: np.ndarray) -> np.ndarray:
    """Power-of-two bin of each length: bin 0 holds 0 and 1, bin k >= 1 holds [2^k, 2^(k+1)).

    Bin 0 takes 0 as well because log2 is undefined there.
    """
    return np.floor(np.log2(np.maximum(tokens, 1).astype(np.float64))).astype(np.int64)


def length_chart(counts: np.ndarray, what: str) -> Series:
    """The length chart from per-bin request counts (``log2_bin``): x each bin's lower edge."""
    ks = np.arange(counts.size)
    return Series(
        name=f"{what} length distribution",
        x_label=f"{what} length, bin lower edge",
        x_unit="tokens",
        y_label="requests",
        y_unit="count",
        x=tuple(float(v) for v in np.where(ks == 0, 0.0, 2.0**ks)),
        y=tuple(float(v) for v in counts),
        kind="bar",
    )


def length_histogram(tokens: np.ndarray, what: str) -> Series | None:
    """Requests per power-of-two token-length bin: [0, 2), [2, 4), [4, 8), ... (None if empty).

    Powers of two because prompt and output lengths are heavy-tailed (spanning 1 to 100k+
    tokens); x is each bin's lower edge in tokens, y the number of requests in it.
    """
    if tokens.size == 0:
        return None
    return length_chart(np.bincount(log2_bin(tokens)), what)


MAX_MODELS_LISTED = 20


def listed_models(names: Iterable[object]) -> tuple[str, ...]:
    """Distinct served-model names as the report lists them: sorted, at most MAX_MODELS_LISTED."""
    return tuple(sorted({str(n) for n in names})[:MAX_MODELS_LISTED])


def trace_models(trace: Trace) -> tuple[str, ...]:
    """Distinct non-null values of the ``model`` column, sorted, at most MAX_MODELS_LISTED."""
    if "model" not in trace.table.column_names:
        return ()
    return listed_models(pc.unique(trace.table["model"].drop_null()).to_pylist())


def options_record(options: AnalyzeOptions) -> dict[str, Any]:
    """The options as plain values for the report's inputs.

    Loaded rule and catalog objects are left out: their versions are recorded separately.
    """
    record: dict[str, Any] = {}
    for f in dataclasses.fields(options):
        if f.name == "advisor_inputs":
            continue
        value = getattr(options, f.name)
        if f.name == "plans":
            # A plan is echoed by its file; its review is its own section.
            value = tuple(p.path for p in value)
        elif isinstance(value, tuple):
            value = tuple(
                dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in value
            )
        record[f.name] = value
    return record


def summarize_trace(trace: Trace, sha256: str | None = None) -> TraceSummary:
    """Counts, span, columns and workload chart data of a trace."""
    duration = trace.duration_s
    t = trace.table
    return TraceSummary(
        path=trace.source_path,
        format=trace.source_format,
        requests=trace.requests,
        duration_s=duration,
        block_tokens=trace.block_tokens,
        columns=trace.columns,
        input_tokens_total=int(pc.sum(t["input_tokens"]).as_py() or 0),
        output_tokens_total=int(pc.sum(t["output_tokens"]).as_py() or 0),
        arrival_rate_per_s=trace.arrival_rate_per_s,  # None when arrivals were not measured
        dropped=dict(trace.dropped),
        notes=trace.notes,
        capabilities=capabilities(trace),
        sha256=sha256,
        models=trace_models(trace),
        arrivals=arrival_series(trace.column_np("arrival_s"), duration),
        input_tokens_hist=length_histogram(trace.column_np("input_tokens"), "input"),
        output_tokens_hist=length_histogram(trace.column_np("output_tokens"), "output"),
    )


def analyze(
    trace: Trace,
    options: AnalyzeOptions | None = None,
    *,
    version: str,
    generated_at: str,
    trace_sha256: str | None = None,
) -> AdviceReport:
    """Run every analysis the trace supports and return the report.

    ``trace_sha256`` is the hash of the trace file (the caller read the file; this stays pure).
    """
    options = options or AnalyzeOptions()
    meta = Meta(FORMAT_VERSION, version, generated_at)
    simulated = (
        simulate_section_cache(
            trace,
            warmup_fraction=options.warmup_fraction,
            chunk_tokens=options.cache_chunk_tokens,
            save_unfull_chunk=options.cache_save_unfull_chunk,
            sample_rate=options.cache_sample_rate,
        )
        if trace.has_hashes
        else None
    )
    hits, hits_source = prefix_hits(trace, simulated[1] if simulated else None)
    stages = profile_workload(
        trace, options.profile_options(), hit_tokens=hits, hits_source=hits_source
    )
    prefix_cache = prefix_cache_section(
        trace,
        simulated,
        warmup_fraction=options.warmup_fraction,
        tiers=options.cache_tiers,
        instances=options.cache_instances,
        routing_seed=options.cache_routing_seed,
        save_unfull_chunk=options.cache_save_unfull_chunk,
        kv_bytes_per_token=stages.model.kv_bytes_per_token,
    )
    report = AdviceReport(
        meta=meta,
        trace=summarize_trace(trace, sha256=trace_sha256),
        model=stages.model,
        stage_split=stages.stage_split,
        prefix_cache=prefix_cache,
        io=stages.io,
        options=options_record(options),
    )
    inputs = options.advisor_inputs or load_advisor_inputs()
    report = _advise(report, options, inputs, stages)
    if options.plans:
        # The section's pass serves the review when it is exact and ran on the trace as it is
        # (not coarsened to --chunk-tokens).
        same = (
            simulated[1]
            if simulated is not None and simulated[0] is trace and simulated[1].exact
            else None
        )
        report = replace(
            report,
            plan_reviews=review_plans(
                trace, options.plans, warmup_fraction=options.warmup_fraction, simulated=same
            ),
        )
    return replace(
        report,
        versions=data_versions(inputs),
        unavailable=unavailable_reasons(trace, report),
    )


def prefix_hits(
    trace: Trace, simulated: PrefixCacheResult | None
) -> tuple[np.ndarray | None, str | None]:
    """Per-request prefix-hit tokens for the stage profiler, and where they came from.

    With block hashes: the report's prefix-cache simulation at unbounded capacity (coarsened to
    the engine chunk size when one is given), unless it sampled (no per-request hits then).
    Else the engine's ``cached_tokens``. Else None: unknown.
    """
    if simulated is not None and simulated.hit_tokens is not None:
        return (
            np.asarray(simulated.hit_tokens, dtype=np.float64),
            "prefix-cache simulation (unbounded capacity)",
        )
    hits = trace_hit_tokens(trace)
    return hits, ("cached_tokens" if hits is not None else None)


def _advise(
    report: AdviceReport,
    options: AnalyzeOptions,
    inputs: AdvisorInputs,
    stages: StageProfile | None,
) -> AdviceReport:
    """Facts from the report's sections -> rules and catalogs -> recommendation and findings."""
    advisor_options = AdvisorOptions(
        chunk_tokens=options.chunk_tokens,
        storage=options.storage,
        instance=parse_instance_choice(options.instance),
    )
    extra = stages.facts if stages is not None else None
    return advise_report(report, inputs, advisor_options, extra_facts=extra)


def _fingerprint(items: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(items)).encode("utf-8")).hexdigest()[:12]


def data_versions(inputs: AdvisorInputs) -> dict[str, str]:
    """What rules and catalogs the advice used: entry counts and a content fingerprint.

    The fingerprint is the sha256 of the loaded entries (file locations left out), so two
    reports can be told apart when their rules or catalogs differ.
    """
    rules = [repr(replace(r, path="")) for r in inputs.rules]
    storage = [f"{k}={v!r}" for k, v in inputs.storage.items()]
    instances = [f"{k}={v!r}" for k, v in inputs.instances.items()]
    return {
        "rules": f"{len(rules)} rules, sha256 {_fingerprint(rules)}",
        "storage catalog": f"{len(storage)} entries, sha256 {_fingerprint(storage)}",
        "instance catalog": f"{len(instances)} entries, sha256 {_fingerprint(instances)}",
    }


def unavailable_reasons(trace: Trace | TraceStream, report: AdviceReport) -> dict[str, str]:
    """Why each section left empty is empty, in words a reader can act on.

    Of the trace it asks only whether it has block hashes, which a stream knows too.
    """
    why: dict[str, str] = {}
    if report.prefix_cache is None:
        why["prefix_cache"] = (
            "the trace has no block hashes, so prefix reuse cannot be measured"
            if not trace.has_hashes
            else "the prefix-cache simulation did not run"
        )
    if report.model is None:
        why["model"] = "no model given (--model), so KV bytes per token are unknown"
    if report.stage_split is None:
        why["stage_split"] = "the stage profiler did not run"
    if report.io is None:
        why["io"] = "I/O demand needs the model's KV bytes per token and the cache simulation"
    if report.recommendation is None:
        why["recommendation"] = "the advisor did not run (no rules were evaluated)"
    return why
