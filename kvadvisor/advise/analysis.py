"""The analysis pipeline: trace -> measurements -> AdviceReport (pure; no file I/O)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.compute as pc

from kvadvisor.advise.advisor import (
    AdvisorInputs,
    AdvisorOptions,
    advise_report,
    load_advisor_inputs,
    parse_instance_choice,
)
from kvadvisor.advise.cache_section import prefix_cache_section
from kvadvisor.advise.model import FORMAT_VERSION, AdviceReport, Meta, TraceSummary
from kvadvisor.cache.tiers import TierSpec
from kvadvisor.trace.model import Trace


@dataclass(frozen=True)
class AnalyzeOptions:
    """Every analysis knob, with defaults; the CLI fills it from options and config."""

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


def summarize_trace(trace: Trace) -> TraceSummary:
    """Counts, span and columns of a trace."""
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
        arrival_rate_per_s=(trace.requests / duration) if duration > 0 else None,
        dropped=dict(trace.dropped),
        notes=trace.notes,
    )


def analyze(
    trace: Trace,
    options: AnalyzeOptions | None = None,
    *,
    version: str,
    generated_at: str,
) -> AdviceReport:
    """Run every analysis the trace supports and return the report."""
    options = options or AnalyzeOptions()
    meta = Meta(FORMAT_VERSION, version, generated_at)
    prefix_cache = prefix_cache_section(
        trace,
        warmup_fraction=options.warmup_fraction,
        tiers=options.cache_tiers,
        instances=options.cache_instances,
        routing_seed=options.cache_routing_seed,
        chunk_tokens=options.cache_chunk_tokens,
        save_unfull_chunk=options.cache_save_unfull_chunk,
        sample_rate=options.cache_sample_rate,
    )
    report = AdviceReport(meta=meta, trace=summarize_trace(trace), prefix_cache=prefix_cache)
    return _advise(report, options)


def _advise(report: AdviceReport, options: AnalyzeOptions) -> AdviceReport:
    """Facts from the report's sections -> rules and catalogs -> recommendation and findings."""
    advisor_options = AdvisorOptions(
        chunk_tokens=getattr(options, "chunk_tokens", None) or options.cache_chunk_tokens or 256,
        storage=options.storage,
        instance=parse_instance_choice(options.instance),
    )
    inputs = options.advisor_inputs or load_advisor_inputs()
    return advise_report(report, inputs, advisor_options)
