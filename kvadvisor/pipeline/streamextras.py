"""A streamed trace's cache extras: exact when its rows fit, else estimated on a hash sample.

The extras (routing comparison, reuse times and TTL, block-size comparison, shared prefixes)
run in memory on the trace's rows (:func:`kvadvisor.cache.measure.with_extras`). A streamed
trace gets them the same way, figure for figure, when its curve is exact and its whole rows fit
the memory limit (the rows the replay of the verdict reads, :func:`whole_source`); otherwise
one more pass over the stream keeps a spatial hash sample and estimates reuse times, block sizes
and routing on it (:mod:`kvadvisor.cache.sampledextras`), each with its rate and standard error
in the report (``prefix_cache.extras_sampling``). Shared prefixes need every block of the
prefix tree and are left out of an estimate, and the note says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from kvadvisor.cache.measure import EXTRAS_MAX_ACCESSES, PrefixMeasurements, with_extras
from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.cache.prefix import warmup_requests_for
from kvadvisor.cache.sampledextras import (
    EXTRAS_TARGET_SAMPLED_ACCESSES,
    ExtrasCollector,
    SampledExtras,
)
from kvadvisor.cache.shards import readable_rate, record_parts
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.pipeline.replay import ReplaySource
from kvadvisor.results.report import AdviceReport, PrefixCache
from kvadvisor.sections.prefix import estimated_fields, estimated_note, extras_fields
from kvadvisor.trace.model import Trace
from kvadvisor.trace.stream import TraceStream
from kvadvisor.units import Unit, format_value
from kvadvisor.units.format import number

# The sampled extras' state per sampled block access: key, request, tokens and label (25 B)
# and arrival (8 B) as collected, three routes (24 B), twice while the batches are joined;
# then dense ids and their hash table (24 B), leading distances, gaps, running maxima, tokens
# and positions (36 B), and one instance's selection at a time. Measured: see docs/benchmarks.md
# (issue 27, "extras"); 200 B keeps headroom over the ~180 B counted here.
EXTRAS_SAMPLED_BYTES_PER_ACCESS = 200
MIN_EXTRAS_RATE = 1e-4
EXTRA_COLUMNS = ("arrival_s", "input_tokens", "block_hashes", "session_id")


@dataclass(frozen=True)
class ExtrasPlan:
    """How a streamed trace's extras run: "exact", "sampled" (at ``rate``) or "none" (why)."""

    mode: str
    rate: float | None
    reason: str


def _size(nbytes: float) -> str:
    return format_value(nbytes, Unit.BYTES)


def plan_extras(
    *,
    block_accesses: int,
    exact_curve: bool,
    rows_bytes: int,
    peak_bytes: int,
    memory_limit_bytes: int,
) -> ExtrasPlan:
    """Exact extras when the curve is exact and the rows fit, else the largest sample that does.

    ``rows_bytes``: the whole trace's rows with the extras' passes (planned as the replay's
    whole rows, whose per-access figure was measured with the extras running); ``peak_bytes``:
    what the rest of the streamed analysis is planned to hold, beside which the sample runs.
    """
    limit = _size(memory_limit_bytes)
    if block_accesses == 0:
        return ExtrasPlan("none", None, "the trace has no block accesses")
    if exact_curve and block_accesses <= EXTRAS_MAX_ACCESSES and rows_bytes <= memory_limit_bytes:
        return ExtrasPlan(
            "exact", None, f"the whole trace's rows fit ({_size(rows_bytes)} of {limit})"
        )
    why = (
        "the sampled curve leaves no exact pass to share"
        if not exact_curve
        else f"more than {number(EXTRAS_MAX_ACCESSES)} block accesses"
        if block_accesses > EXTRAS_MAX_ACCESSES
        else f"the whole trace's rows need {_size(rows_bytes)} > the memory limit {limit}"
    )
    room = memory_limit_bytes - peak_bytes
    fits = room / (EXTRAS_SAMPLED_BYTES_PER_ACCESS * block_accesses)
    rate = min(1.0, fits, EXTRAS_TARGET_SAMPLED_ACCESSES / block_accesses)
    if rate < MIN_EXTRAS_RATE:
        need = peak_bytes + EXTRAS_SAMPLED_BYTES_PER_ACCESS * MIN_EXTRAS_RATE * block_accesses
        return ExtrasPlan(
            "none",
            None,
            f"{why}, and even a sample at rate {number(MIN_EXTRAS_RATE)} needs {_size(need)} "
            f"({EXTRAS_SAMPLED_BYTES_PER_ACCESS} B per sampled block access beside the rest of "
            f"the analysis, {_size(peak_bytes)}), over the memory limit {limit}",
        )
    return ExtrasPlan("sampled", readable_rate(rate), why)


def add_extras(
    report: AdviceReport,
    stream: TraceStream,
    result: PrefixCacheResult | None,
    options: AnalyzeOptions,
    plan: ExtrasPlan,
    rows: Callable[[], tuple[Trace, ReplaySource]],
) -> AdviceReport:
    """``report`` with its prefix-cache extras, as ``plan`` says, and a note of what ran."""
    section = report.prefix_cache
    if result is None or section is None or plan.mode == "none":
        if section is not None and result is not None:
            section = _noted(section, f"routing, reuse times, block sizes and shared prefixes "
                             f"left out: {plan.reason}")  # fmt: skip
            return replace(report, prefix_cache=section)
        return report
    if plan.mode == "exact":
        measured = _exact(stream, result, options, rows)
        section = replace(section, **extras_fields(measured))
        note = f"routing, reuse times, block sizes and shared prefixes exact: {plan.reason}"
        if measured.tree_problem is not None:
            note = f"{note}; {measured.tree_problem}"
        return replace(report, prefix_cache=_noted(section, note))
    assert plan.rate is not None
    est = sampled_extras(stream, result, options, plan.rate)
    section = replace(section, **estimated_fields(est))
    return replace(report, prefix_cache=_noted(section, f"{plan.reason}: {estimated_note(est)}"))


def _noted(section: PrefixCache, note: str) -> PrefixCache:
    return replace(section, note=note if not section.note else f"{section.note}; {note}")


def _exact(
    stream: TraceStream,
    result: PrefixCacheResult,
    options: AnalyzeOptions,
    rows: Callable[[], tuple[Trace, ReplaySource]],
) -> PrefixMeasurements:
    """The in-memory extras on the whole trace's rows and the streamed exact pass."""
    _, source = rows()
    arrays = source.arrays
    if "session_id" in stream.columns:
        # The replay's rows leave the sessions out; the routing comparison reads them.
        column = pa.Table.from_batches(list(stream.select(("session_id",))))["session_id"]
        arrays = replace(arrays, session_ids=column)
    assert arrays.blocks is not None
    measured = PrefixMeasurements(arrays, arrays.blocks, False, result, False)
    return with_extras(
        measured,
        warmup_fraction=options.warmup_fraction,
        save_unfull_chunk=options.cache_save_unfull_chunk,
        instances=options.cache_instances,
        routing_seed=options.cache_routing_seed,
    )


def sampled_extras(
    stream: TraceStream, result: PrefixCacheResult, options: AnalyzeOptions, rate: float
) -> SampledExtras:
    """One pass over the stream into the spatial sample, and the estimates from it."""
    narrow = stream.select(EXTRA_COLUMNS)
    collector = ExtrasCollector(
        block_tokens=int(stream.block_tokens or 0),
        requests=stream.requests,
        warmup=warmup_requests_for(stream.requests, options.warmup_fraction),
        rate=rate,
        instances=options.cache_instances,
        seed=options.cache_routing_seed,
        save_unfull_chunk=options.cache_save_unfull_chunk,
        sessions="session_id" in narrow.columns,
    )
    for batch in narrow:
        ((inp, offsets, values),) = record_parts([batch])
        arrival = batch.column("arrival_s").to_numpy(zero_copy_only=False)
        sessions = batch.column("session_id") if collector.sessions else None
        collector.add(inp, offsets, values, np.asarray(arrival, np.float64), sessions)
    return collector.estimate(result)
