"""The `verify` pipeline: replay the trace's prefix cache as `review` does, then write the jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.pipeline.review import replay_trace
from kvadvisor.plan.model import Plan
from kvadvisor.trace.detect import TraceFormat
from kvadvisor.trace.model import Trace
from kvadvisor.trace.readers import read_trace
from kvadvisor.verifyjobs import VerifyOptions, VerifySet, verify_plan


def verify(
    source: str | Path | Trace,
    plan: Plan,
    storage: Mapping[str, StorageSpec],
    options: VerifyOptions,
    *,
    version: str,
    trace_sha256: str | None = None,
    trace_format: str | TraceFormat | None = None,
    column_map: Sequence[str] | None = None,
    block_tokens: int | None = None,
) -> VerifySet:
    """The one `verify` entry: read the trace whole, replay it once, build the jobs for ``plan``.

    ``storage`` is the storage catalog the plan was loaded with (for the tiers' I/O unit and
    GPUDirect support).
    """
    trace = (
        source
        if isinstance(source, Trace)
        else read_trace(source, trace_format, column_map=column_map, block_tokens=block_tokens)
    )
    replay, notes = replay_trace(trace, options.warmup_fraction)
    return verify_plan(
        trace,
        replay,
        plan,
        storage,
        options,
        version=version,
        trace_sha256=trace_sha256,
        replay_notes=notes,
    )
