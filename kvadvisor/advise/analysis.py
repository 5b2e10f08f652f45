"""The analysis pipeline: trace -> measurements -> AdviceReport (pure; no file I/O)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.compute as pc

from kvadvisor.advise.model import FORMAT_VERSION, AdviceReport, Meta, TraceSummary
from kvadvisor.advise.profile import ProfileOptions, profile_workload
from kvadvisor.metrics import trace_hit_tokens
from kvadvisor.trace.model import Trace


@dataclass(frozen=True)
class AnalyzeOptions:
    """Every analysis knob, with defaults; the CLI fills it from options and config."""

    warmup_fraction: float = 0.5
    # Stage profiler (docs/stage-profiler.md); None = the documented default, reported as assumed.
    model: str | None = None
    gpu: str | None = None
    kv_dtype: str = "bf16"
    weight_dtype: str = "bf16"
    tp: int | None = None
    window_s: float = 1.0
    chunk_tokens: int = 256
    io_unit_bytes: int = 4096
    drive_capacity_bytes: float | None = None
    instances: int = 1  # model instances the trace's load is spread over

    def profile_options(self) -> ProfileOptions:
        """The stage profiler's slice of the options."""
        return ProfileOptions(
            model=self.model, gpu=self.gpu, kv_dtype=self.kv_dtype,
            weight_dtype=self.weight_dtype, tp=self.tp, window_s=self.window_s,
            chunk_tokens=self.chunk_tokens, io_unit_bytes=self.io_unit_bytes,
            drive_capacity_bytes=self.drive_capacity_bytes, instances=self.instances,
        )


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
    # Prefix hits per request: the engine's cached_tokens when the trace has them. The prefix
    # cache simulation (block hashes) will pass its per-request hit tokens here once merged.
    hits = trace_hit_tokens(trace)
    stages = profile_workload(trace, options.profile_options(), hit_tokens=hits,
                              hits_source="cached_tokens" if hits is not None else None)
    return AdviceReport(meta=meta, trace=summarize_trace(trace), model=stages.model,
                        stage_split=stages.stage_split, io=stages.io)
