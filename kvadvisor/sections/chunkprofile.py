"""The stage profile of a trace too large to hold per request: chunk by chunk, bounded memory.

Each chunk of consecutive requests is profiled with some requests before and after it as
context (their decodes overlap the chunk's, so its batches are seen whole), and only its own
requests are added to :class:`kvadvisor.metrics.chunked.ChunkedStages`. The step model is
calibrated on the first chunk's measured requests. What differs from the one-pass profile
(docs/scale.md says it with the measured error): the decode batch is computed per chunk (a
request whose decode outlasts the look-ahead sees a smaller batch), on a finer time grid, and
quantiles over requests come from a sketch (within ``sketch.RELATIVE_ERROR``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.metrics import stage_times
from kvadvisor.metrics.chunked import ChunkedStages
from kvadvisor.perfmodel import break_even_tokens, memory_fit, reference_tiers
from kvadvisor.sections.profile import (
    ProfileInputs,
    ProfileOptions,
    StageProfile,
    _facts,
    _fit,
    _io_section,
    _model_section,
    _split_section,
    build_perf_model,
    split_caveats,
    split_source,
    trace_model_name,
)
from kvadvisor.units import plural


@dataclass(frozen=True, eq=False)
class ProfileChunk:
    """A chunk's requests with their context rows, as the profiler reads them.

    ``core``: the chunk's own rows within ``inputs``; ``core_s``: the time from the chunk's
    first arrival to the next chunk's (whose decode batches it sees whole); ``hits``: prefix
    hit tokens of every row of ``inputs`` (None: unknown).
    """

    inputs: ProfileInputs
    hits: np.ndarray | None
    core: slice
    core_s: tuple[float, float]


def profile_chunks(
    chunks: Iterable[ProfileChunk],
    options: ProfileOptions,
    *,
    models: tuple[str, ...],
    mean_context_tokens: float,
    hits_source: str | None,
    catalogs: PerfCatalogs | None = None,
) -> StageProfile:
    """The stage profile summed over ``chunks`` (in arrival order, each with its context).

    ``mean_context_tokens``: the whole trace's mean prompt + output tokens (the batch cap is
    sized on it, as in :func:`profile_workload`).
    """
    trace_model = trace_model_name(models, catalogs)
    pm, spec, notes, assumed = build_perf_model(options, trace_model, catalogs)
    max_batch = max(memory_fit(pm, mean_context_tokens or 1.0).max_concurrent_requests, 1.0)
    acc: ChunkedStages | None = None
    fit = None
    hits_known = hits_source is not None
    for chunk in chunks:
        a = chunk.inputs.arrays
        # The chunk's grid starts at its first window, so its cells are as fine as one
        # in-memory profile's of the chunk alone.
        shift = float(np.floor(a.arrival_s.min(initial=0.0) / options.window_s) * options.window_s)
        columns = (a.arrival_s - shift, a.input_tokens, a.output_tokens)
        run = {
            "hit_tokens": chunk.hits,
            "iterations": options.iterations,
            "instances": options.instances,
            "max_batch": max_batch,
            "measured": chunk.inputs.measured,
        }
        if fit is None:
            first = stage_times(*columns, pm, **run)
            # Calibrated on the first chunk's measured requests (a bounded fit).
            fit = _fit(
                chunk.inputs,
                pm,
                spec.name,
                first,
                lambda p, c=columns, r=run: stage_times(*c, p, **r),
            )
            pm, times = fit.pm, fit.times
            acc = ChunkedStages(
                window_s=options.window_s,
                chunk_tokens=options.chunk_tokens,
                io_unit_bytes=options.io_unit_bytes,
                hits_known=hits_known,
                kv_bytes=pm.kv_bytes,
                breakevens=tuple(break_even_tokens(pm, t) for t in reference_tiers(pm.gpu)),
            )
        else:
            times = stage_times(*columns, pm, **run)
        assert acc is not None
        acc.add(times, chunk.core, shift, chunk.core_s)
    assert acc is not None and fit is not None, "profile_chunks needs at least one chunk"
    notes = [*notes, *fit.notes]
    source, source_notes = split_source((acc.measured, acc.requests), fit.calibrated)
    summary = acc.split()
    split_notes = [*fit.split_notes, *source_notes]
    split_notes += split_caveats(acc.iterations, acc.instances, summary, source, hits_known)
    split_notes.append(
        f"profiled in {plural(acc.chunks, 'chunk')} of consecutive requests (the trace is larger "
        "than the memory limit holds per request); quantiles over requests are sketched "
        "(docs/scale.md states the error)"
    )
    if fit.calibrated:
        split_notes.append("calibrated on the first chunk's measured requests")
    io = acc.io(options.drive_capacity_bytes)
    concurrency = acc.concurrency()
    tiers = list(reference_tiers(pm.gpu))

    def below(tokens: float | None) -> float | None:
        index = next(i for i, t in enumerate(tiers) if break_even_tokens(pm, t) == tokens)
        return acc.share_below(index)

    io_section = _io_section(io, below, pm, hits_known, concurrency)
    requests = max(acc.requests, 1)
    context = (acc.sums.get("context", 0.0) / requests, acc.peak_kv_rank)
    return StageProfile(
        model=_model_section(pm, spec, options, context, notes, assumed),
        stage_split=_split_section(
            summary, source, hits_source, fit.summary, acc.share_hist, split_notes, pm.tp
        ),
        io=io_section,
        facts=_facts(
            pm,
            acc.instances,
            acc.sums.get("context_kv", 0.0) / requests,
            io_section,
            concurrency[1],
        ),
        calibration=fit.step,
    )
