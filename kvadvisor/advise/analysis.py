"""The analysis pipeline: trace -> measurements -> AdviceReport (pure; no file I/O)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.compute as pc

from kvadvisor.advise.model import FORMAT_VERSION, AdviceReport, Meta, TraceSummary
from kvadvisor.trace.describe import capabilities
from kvadvisor.trace.model import Trace


@dataclass(frozen=True)
class AnalyzeOptions:
    """Every analysis knob, with defaults; the CLI fills it from options and config."""

    warmup_fraction: float = 0.5


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
        capabilities=capabilities(trace),
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
    return AdviceReport(meta=meta, trace=summarize_trace(trace))
