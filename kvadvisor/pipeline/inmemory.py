"""Analysis of a trace held in memory: every section the trace supports, exact (pure)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kvadvisor import phases
from kvadvisor.advice.inputs import load_advisor_inputs
from kvadvisor.cache.measure import measure_prefix_cache
from kvadvisor.pipeline.assemble import (
    advise_sections,
    context_model,
    data_versions,
    prefix_hits,
    refresh_advice,
    trace_view,
    unavailable_reasons,
    with_context,
)
from kvadvisor.pipeline.options import AnalyzeOptions, options_record
from kvadvisor.pipeline.replay import ReplaySource, replay_recommendation
from kvadvisor.pipeline.review import review_plans
from kvadvisor.results.common import Meta
from kvadvisor.results.report import FORMAT_VERSION, AdviceReport
from kvadvisor.sections.context import check_context
from kvadvisor.sections.prefix import prefix_cache_section
from kvadvisor.sections.profile import ProfileInputs, profile_workload
from kvadvisor.sections.workload import summarize_trace
from kvadvisor.trace.arrays import RequestArrays
from kvadvisor.trace.model import Trace


def analyze_trace(
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
    inputs = options.advisor_inputs or load_advisor_inputs()
    # Requests longer than the model's context are counted first: refused, or served
    # rope-scaled, or left out of everything below (--over-context), never silently.
    # Taken from the trace once (hashes and sessions too); every step below shares them.
    arrays = RequestArrays.of(trace)
    lengths = arrays.input_tokens.astype(np.int64) + arrays.output_tokens.astype(np.int64)
    kept, context = check_context(
        trace, context_model(trace, options.model, inputs.perf), options.over_context, lengths
    )
    if kept.table.num_rows != trace.table.num_rows:  # requests left out: the kept rows' arrays
        arrays = RequestArrays.of(kept)
    trace = kept
    phases.enter(phases.CACHE)
    measured = measure_prefix_cache(
        arrays,
        warmup_fraction=options.warmup_fraction,
        chunk_tokens=options.cache_chunk_tokens,
        save_unfull_chunk=options.cache_save_unfull_chunk,
        sample_rate=options.cache_sample_rate,
        instances=options.cache_instances,
        routing_seed=options.cache_routing_seed,
    )
    hits, hits_source = prefix_hits(trace, measured.result if measured else None)
    summary = summarize_trace(trace, sha256=trace_sha256, arrays=arrays)
    # The profiler reads the arrays and the summary's model names, not the table again.
    phases.enter(phases.PROFILE)
    stages = profile_workload(
        ProfileInputs.of(trace, arrays, summary.models),
        options.profile_options(),
        hit_tokens=hits,
        hits_source=hits_source,
        catalogs=inputs.perf,
    )
    prefix_cache = prefix_cache_section(
        measured,
        warmup_fraction=options.warmup_fraction,
        tiers=options.cache_tiers,
        kv_bytes_per_token=stages.model.kv_bytes_per_token,
    )
    report = AdviceReport(
        meta=meta,
        trace=summary,
        model=stages.model,
        stage_split=stages.stage_split,
        prefix_cache=prefix_cache,
        io=stages.io,
        options=options_record(options),
    )
    # The section's pass serves the review and the replays when it is exact and ran on the
    # trace as it is (not coarsened to --chunk-tokens).
    same = (
        measured.result
        if measured is not None and not measured.coarsened and measured.result.exact
        else None
    )
    # Every replay of this analysis (the recommendation's, each plan's) shares one context.
    replays = ReplaySource(arrays, same)
    report = advise_sections(report, options, inputs, stages, trace_view(trace, arrays, replays))
    phases.enter(phases.REPLAY)
    report = replay_recommendation(
        trace, report, replace(options, advisor_inputs=inputs), replays, stages.calibration
    )
    report = refresh_advice(report, options, inputs, stages)
    if options.plans:
        phases.enter(phases.REVIEW)
        report = replace(
            report,
            plan_reviews=review_plans(
                trace,
                options.plans,
                warmup_fraction=options.warmup_fraction,
                simulated=same,
                arrays=arrays,
                source=replays,
                rules=inputs.rules,
            ),
        )
    report = with_context(report, context)
    return replace(
        report,
        versions=data_versions(inputs),
        unavailable=unavailable_reasons(trace, report),
    )
