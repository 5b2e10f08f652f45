"""What both ways of analysing share: hits, the advisor's pass, data versions, empty sections.

Prefix hits for the stage profiler, the advisor's pass over the report's sections, the record
of the rules and catalogs used, and why a section is empty.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np

from kvadvisor.advice.advisor import (
    AdvisorOptions,
    advise_report,
    parse_instance_choice,
    parse_providers,
    refresh_findings,
)
from kvadvisor.advice.inputs import AdvisorInputs
from kvadvisor.advice.recommend import TraceView
from kvadvisor.cache import PrefixCacheResult
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.fleet import TraceArrays
from kvadvisor.metrics import trace_hit_tokens
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.pipeline.replay import ReplaySource
from kvadvisor.results.report import AdviceReport, ContextCheck
from kvadvisor.sections.profile import DEFAULT_MODEL, StageProfile, trace_model_name
from kvadvisor.sections.workload import trace_models
from kvadvisor.trace.arrays import BlockArrays, RequestArrays
from kvadvisor.trace.model import Trace
from kvadvisor.trace.stream import TraceStream
from kvadvisor.vocab import SplitSource


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


def trace_view(trace: Trace, arrays: RequestArrays, source: ReplaySource) -> TraceView:
    """The trace as the deployment search reads it: columns, evidence, rows on demand.

    Built on the request arrays the pipeline took from the trace once; the whole trace's
    replay arrays are the shared replay source's (block ids of the exact pass), a slice's are
    derived from the slice of the same arrays.
    """

    def rows(start: int, stop: int) -> TraceArrays:
        if (start, stop) == (0, arrays.requests):
            return source.context.arrays
        return TraceArrays.from_arrays(slice_arrays(arrays, start, stop))

    return TraceView(
        arrival_s=arrays.arrival_s,
        input_tokens=arrays.input_tokens,
        output_tokens=arrays.output_tokens,
        arrivals_measured=trace.arrivals_measured,
        has_hashes=trace.has_hashes,
        rows=rows,
        path=trace.source_path,
    )


def slice_arrays(arrays: RequestArrays, start: int, stop: int) -> RequestArrays:
    """Requests ``start:stop`` of ``arrays``, their block hashes with their own offsets."""
    blocks = arrays.blocks
    if blocks is not None:
        first, last = int(blocks.offsets[start]), int(blocks.offsets[stop])
        blocks = BlockArrays(
            blocks.offsets[start : stop + 1] - first, blocks.values[first:last], blocks.block_tokens
        )
    return RequestArrays(
        arrays.arrival_s[start:stop],
        arrays.input_tokens[start:stop],
        arrays.output_tokens[start:stop],
        blocks,
    )


def advise_sections(
    report: AdviceReport,
    options: AnalyzeOptions,
    inputs: AdvisorInputs,
    stages: StageProfile | None,
    view: TraceView | None = None,
) -> AdviceReport:
    """Facts from the report's sections -> rules and catalogs -> recommendation and findings.

    ``view`` is the trace the deployment search replays (None: the verdicts say why none ran).
    """
    advisor_options = AdvisorOptions(
        chunk_tokens=options.chunk_tokens,
        storage=options.storage,
        instance=parse_instance_choice(options.instance),
        providers=parse_providers(options.providers),
        slo=options.slo,
        headroom=options.headroom,
        spare=options.spare,
        price_kind=options.price_kind,
        engine=options.engine or "vllm",
        search=options.search,
    )
    extra = stages.facts if stages is not None else None
    return advise_report(
        report, inputs, advisor_options, extra_facts=extra, view=view, executor=options.executor
    )


def refresh_advice(
    report: AdviceReport,
    options: AnalyzeOptions,
    inputs: AdvisorInputs,
    stages: StageProfile | None,
) -> AdviceReport:
    """The rules again on the report as it now stands (the replay's split), same choice."""
    if report.stage_split is None or report.stage_split.source is not SplitSource.REPLAY:
        return report
    advisor_options = AdvisorOptions(
        chunk_tokens=options.chunk_tokens,
        storage=options.storage,
        instance=parse_instance_choice(options.instance),
        providers=parse_providers(options.providers),
        slo=options.slo,
        headroom=options.headroom,
        spare=options.spare,
    )
    extra = stages.facts if stages is not None else None
    return refresh_findings(report, inputs, advisor_options, extra_facts=extra)


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


def context_model(trace: Trace, model: str | None, catalogs: PerfCatalogs) -> ModelSpec:
    """The model the analysis sizes for: --model, the trace's model column, else the default."""
    name = model or trace_model_name(trace_models(trace), catalogs) or DEFAULT_MODEL
    return catalogs.resolve_model(name)


# Decisions a verdict must carry: requests served differently or left out, or not checked.
STATED_DECISIONS = ("rope", "exclude", "unknown")


def with_context(report: AdviceReport, check: ContextCheck) -> AdviceReport:
    """The report with its context check, the decision first among every verdict's notes."""
    rec = report.recommendation
    verdicts = rec.verdict if rec is not None else None
    if verdicts is not None and check.decision in STATED_DECISIONS:
        note = f"context: {check.statement}"
        verdicts = replace(
            verdicts,
            verdicts=tuple(replace(v, notes=(note, *v.notes)) for v in verdicts.verdicts),
        )
        rec = replace(rec, verdict=verdicts)
    return replace(report, context=check, recommendation=rec)


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
    if report.context is None:
        why["context"] = (
            "request lengths are checked against the model's context on a trace held in "
            "memory; this one was streamed"
        )
    if report.replay is None:
        why["replay"] = report.unavailable.get("replay") or (
            "the recommended deployment was not replayed"
        )
    return why
