"""Analysis of traces larger than memory: one streaming pass, exact curve within a memory budget.

The plan (:func:`plan_analysis`) compares the memory each way of analysing would need with the
budget (``--memory-limit``, by default half the machine's memory,
:data:`kvadvisor.trace.memory.DEFAULT_MEMORY_FRACTION`):

1. ``in_memory``: the whole trace fits with room for every analysis: read it and run
   :func:`kvadvisor.pipeline.inmemory.analyze_trace` (every metric, exact).
2. ``streaming`` with the exact curve: only the flattened block stream is kept (about
   :data:`EXACT_BYTES_PER_ACCESS` bytes per block access), never the whole table.
3. ``streaming`` with a SHARDS sample: the largest spatial sampling rate whose sampled state fits
   the budget; the report states the rate and the error estimate.

In both streaming modes one pass over the record batches computes every metric that allows it
(request and token counts, time span, arrival and length charts, model names, the prefix-cache
curve); a second, narrow pass feeds the stage profiler its per-request columns, whole when
the trace fits one chunk, else chunk by chunk (``ScalePlan.profile_chunk_rows``), so the advice's
memory does not grow with the trace. The deployment search finds its busiest window in a pass
over the arrivals and reads only its rows again; the verdict is replayed on the whole trace's
rows when `analyze` would replay it in memory, else on the busiest window of
:data:`REPLAY_WINDOW_REQUESTS` (:mod:`kvadvisor.pipeline.windows`). The cache extras
(routing, reuse times, block sizes, shared prefixes) run on the whole trace's rows, exactly as
in memory, when those fit; else reuse times, block sizes and routing are estimated on a spatial
hash sample with their errors (:mod:`kvadvisor.pipeline.streamextras`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from kvadvisor import phases
from kvadvisor.advice.inputs import AdvisorInputs, load_advisor_inputs
from kvadvisor.advice.recommend import SEARCH_REQUESTS, VERIFY_REQUESTS, TraceView
from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.cache.shards import readable_rate
from kvadvisor.errors import ConfigError
from kvadvisor.pipeline.assemble import (
    advise_sections,
    data_versions,
    prefix_hits,
    refresh_advice,
    unavailable_reasons,
    with_context,
)
from kvadvisor.pipeline.options import AnalyzeOptions, options_record
from kvadvisor.pipeline.profilechunks import profile_chunks_of
from kvadvisor.pipeline.replay import ReplaySource, replay_recommendation, trace_rows
from kvadvisor.pipeline.scan import Totals, scan
from kvadvisor.pipeline.streamextras import ExtrasPlan, add_extras, plan_extras
from kvadvisor.pipeline.windows import StreamedView, stream_rows, stream_view, whole_source
from kvadvisor.results.common import Meta, TraceSummary
from kvadvisor.results.report import FORMAT_VERSION, AdviceReport, ContextCheck, PrefixCache
from kvadvisor.sections.chunkprofile import profile_chunks
from kvadvisor.sections.context import decide_context
from kvadvisor.sections.prefix import result_section, unknown_prefix_cache
from kvadvisor.sections.profile import (
    DEFAULT_MODEL,
    ProfileInputs,
    StageProfile,
    kv_bytes_per_token_for,
    profile_workload,
    trace_model_name,
)
from kvadvisor.sections.workload import (
    length_summary,
    listed_models,
)
from kvadvisor.trace.describe import capabilities_of
from kvadvisor.trace.memory import physical_memory_bytes
from kvadvisor.trace.model import Trace
from kvadvisor.trace.schema import shifted_note
from kvadvisor.trace.stream import TraceStream
from kvadvisor.units import (
    BYTES_PER_GB,
    BYTES_PER_KB,
    BYTES_PER_MB,
    BYTES_PER_TB,
    Unit,
    format_value,
    plural,
)
from kvadvisor.units.format import count, number
from kvadvisor.units.parse import SIZE_UNITS

# Measured on the Mooncake trace x50 (docs/benchmarks.md): the exact pass adds about 22 B per
# block access over the 8-byte hash it reads (dense ids 13-19 B, arbitrary 64-bit hashes 22 B);
# 40 B keeps headroom and matches the cache engine's stated bound (< 40 B per access).
EXACT_BYTES_PER_ACCESS = 40
# The sampled state: hash, request, tokens and label per kept access (25 B, twice while the
# batches are joined), the exact pass over the sample (hash table, ids, tree, distances) and the
# binning and four error sub-samples. Measured: 2.95 GB peak sampling 23.8M of 70.9M accesses
# of a 10M-request synthetic trace, about 105 B per sampled access over the baseline and the
# per-request arrays; 120 B keeps headroom.
SAMPLED_BYTES_PER_ACCESS = 120
# Per request, streaming keeps offsets and input tokens (exact) or input tokens (sampled, twice
# while the batches are joined; measured 26 B per request with the kernels loaded).
EXACT_BYTES_PER_REQUEST = 16
SAMPLED_BYTES_PER_REQUEST = 32
# In memory, every analysis works on the whole table: the table itself plus the per-request
# arrays the analyses build (times, tokens, hits: about a dozen 8-byte columns) and, per block
# access, the exact pass plus routing, reuse-time and block-size passes. Measured: 1.13 GB peak
# for a 1M-request, 7.08M-access synthetic trace (73 MB table), about 110 B per access over
# the baseline, table and per-request arrays; 120 B keeps headroom.
IN_MEMORY_BYTES_PER_REQUEST = 96
IN_MEMORY_BYTES_PER_ACCESS = 120
# Interpreter, numpy/pyarrow/numba and one record batch in flight.
BASELINE_BYTES = 512 * 1024**2
MIN_SAMPLE_RATE = 1e-4
STREAMED_COLUMNS = ("arrival_s", "input_tokens", "output_tokens", "block_hashes", "model", "ok")

# plan files' size units in any case, plus a bare number (bytes) and K/M/G/T (decimal).
_UNITS = {
    "": 1,
    "k": BYTES_PER_KB,
    "m": BYTES_PER_MB,
    "g": BYTES_PER_GB,
    "t": BYTES_PER_TB,
    **{unit.lower(): factor for unit, factor in SIZE_UNITS.items()},
}


def _size(nbytes: float) -> str:
    return format_value(nbytes, Unit.BYTES)


def parse_memory_limit(text: str) -> int:
    """Bytes from '8GiB', '512MB', '2e9', '50%' (of physical memory); one clear error otherwise.

    Each mistake has its own message: nothing given, no number, an unknown unit, a percentage
    that is not a number or not in (0, 100], a size of zero or below, more than the machine.
    """
    flag = f"--memory-limit {text!r}"
    example = "give a size such as 8GiB, 512MB or 50% of the machine"
    raw = text.strip().replace(" ", "")
    if not raw:
        raise ConfigError(f"{flag}: no size given; {example}")
    s = raw.lower()
    machine = physical_memory_bytes()
    if s.endswith("%"):
        try:
            percent = float(s[:-1])
        except ValueError:
            raise ConfigError(
                f"{flag}: '{raw[:-1]}' is not a number; give a percentage of the machine's "
                "memory such as 50%"
            ) from None
        if not 0.0 < percent <= 100.0:
            raise ConfigError(
                f"{flag}: a percentage of the machine's memory must be more than 0 and at most "
                "100, such as 50%"
            )
        value = int(percent / 100.0 * machine)
    else:
        m = re.fullmatch(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)(.*)", s)
        if not m:
            raise ConfigError(f"{flag}: no number before the unit; {example}")
        unit = m.group(2)
        if unit not in _UNITS:
            units = ", ".join(SIZE_UNITS)
            raise ConfigError(
                f"{flag}: unknown unit '{raw[m.end(1) :]}'; use one of {units} "
                "(KB = 1000 bytes, KiB = 1024), or a percentage such as 50%"
            )
        size = float(m.group(1)) * _UNITS[unit]
        if size > machine:  # also an overflowing number (inf)
            # Rounded down, so the size suggested is itself accepted.
            most_gib = math.floor(machine / 2**30 * 10) / 10
            raise ConfigError(
                f"{flag}: more than this machine's memory ({_size(machine)}); give "
                f"at most {most_gib:.1f}GiB, or a percentage such as 50%"  # exact: typed back
            )
        value = int(size)
    if value <= 0:
        raise ConfigError(f"{flag}: the limit must be more than 0 bytes; {example}")
    return value


@dataclass(frozen=True)
class ScalePlan:
    """How a trace is analysed within ``memory_limit_bytes``, with the estimates behind it.

    ``mode`` is "in_memory" or "streaming"; ``sample_rate`` is None for the exact curve.
    """

    mode: str
    memory_limit_bytes: int
    requests: int
    block_accesses: int
    estimated_in_memory_bytes: int
    estimated_exact_stream_bytes: int
    sample_rate: float | None
    reason: str
    # Whether the streamed stage profile (per-request arrays) fits the limit beside the curve;
    # the search and the replay of its verdict run on the columns the profile read.
    stage_profile: bool = True
    # What the curve's pass and the profile together are planned to need, and what that counts.
    profile_bytes: int = 0
    profile_counts: str = ""
    # Requests per chunk of the streamed profile: the whole trace in one when it fits (the
    # profile then equals the in-memory one), else chunks with context rows (bounded memory).
    profile_chunk_rows: int = 0
    # How the cache extras run: exact on the whole rows, on a hash sample, or not (and why).
    extras: ExtrasPlan = ExtrasPlan("none", None, "the trace is analysed in memory")

    @property
    def exact_curve(self) -> bool:
        """Whether the prefix-cache curve is exact."""
        return self.sample_rate is None


def plan_analysis(
    requests: int,
    block_accesses: int,
    table_bytes: int,
    memory_limit_bytes: int,
    duration_s: float = 0.0,
) -> ScalePlan:
    """The plan of :func:`_plan_curve` and, streamed, how the cache extras run in it.

    The extras (:func:`kvadvisor.pipeline.streamextras.plan_extras`) run after the profile's
    chunks are freed and before the search reads its windows: exact on the whole rows when
    they fit (planned as the replay's whole rows, :func:`replay_bytes`), else on a hash sample
    beside the curve's result, the advice's bounded parts and, when the trace is profiled in
    one chunk, the columns the profile keeps for the search.
    """
    plan = _plan_curve(requests, block_accesses, table_bytes, memory_limit_bytes, duration_s)
    if plan.mode != "streaming":
        return plan
    curve = (
        plan.estimated_exact_stream_bytes
        if plan.exact_curve
        else BASELINE_BYTES + SAMPLED_BYTES_PER_REQUEST * requests
    )
    held = advice_fixed_bytes(requests, block_accesses / max(requests, 1), duration_s)
    if plan.stage_profile and plan.profile_chunk_rows >= requests:
        held += CHUNK_BYTES_PER_ROW * requests
    extras = plan_extras(
        block_accesses=block_accesses,
        exact_curve=plan.exact_curve,
        rows_bytes=replay_bytes(requests, block_accesses),
        peak_bytes=curve + held,
        memory_limit_bytes=memory_limit_bytes,
    )
    return replace(plan, extras=extras)


def _plan_curve(
    requests: int,
    block_accesses: int,
    table_bytes: int,
    memory_limit_bytes: int,
    duration_s: float = 0.0,
) -> ScalePlan:
    """Choose in-memory, streaming exact or streaming sampled from sizes and the budget.

    Estimates (bytes): in memory = baseline + table + 96·requests + 120·accesses; streaming
    exact = baseline + 16·requests + 40·accesses; sampled at rate R = baseline + 32·requests +
    120·R·accesses, R the largest that fits (at least 1e-4). The advice beside the curve
    (profile, search, replay of the verdict) is bounded (:func:`advice_bytes`): the profile
    reads chunks of as many requests as fit, the search and the replay fixed windows.
    ``duration_s``: the trace's span (its per-window series are held whole).
    """
    in_memory = (
        BASELINE_BYTES
        + table_bytes
        + IN_MEMORY_BYTES_PER_REQUEST * requests
        + IN_MEMORY_BYTES_PER_ACCESS * block_accesses
    )
    exact_stream = (
        BASELINE_BYTES
        + EXACT_BYTES_PER_REQUEST * requests
        + EXACT_BYTES_PER_ACCESS * block_accesses
    )
    # The profile pass runs after the curve, beside what the curve's result keeps: the exact
    # result keeps per-access distances, a sampled one the input tokens of every request.
    accesses_per_request = block_accesses / requests if requests else 0.0
    fixed = advice_fixed_bytes(requests, accesses_per_request, duration_s)
    least = fixed + CHUNK_BYTES_PER_ROW * min(requests, MIN_PROFILE_CHUNK_ROWS)

    def chunk_rows(curve_bytes: int) -> int:
        room = memory_limit_bytes - curve_bytes - fixed
        rows = min(room // CHUNK_BYTES_PER_ROW, MAX_PROFILE_CHUNK_ROWS, requests)
        return int(rows) if rows >= min(requests, MIN_PROFILE_CHUNK_ROWS) else 0

    def advice(curve_bytes: int) -> dict:
        """The profile's chunk and the planned peak with the advice (or what it would need)."""
        rows = chunk_rows(curve_bytes)
        peak = curve_bytes + (fixed + CHUNK_BYTES_PER_ROW * rows if rows else least)
        return dict(stage_profile=rows > 0, profile_chunk_rows=rows, profile_bytes=peak)

    profile_bytes = least
    common = dict(
        memory_limit_bytes=memory_limit_bytes,
        requests=requests,
        block_accesses=block_accesses,
        estimated_in_memory_bytes=in_memory,
        estimated_exact_stream_bytes=exact_stream,
    )
    if in_memory <= memory_limit_bytes:
        return ScalePlan(
            mode="in_memory",
            sample_rate=None,
            stage_profile=True,
            profile_chunk_rows=requests,
            reason=(
                f"the whole trace fits the memory limit ({_size(in_memory)} of "
                f"{_size(memory_limit_bytes)}): every analysis, exact"
            ),
            **common,
        )
    profile_part = (
        f"{CHUNK_BYTES_PER_ROW} B per request of a profile chunk (at least "
        f"{number(min(requests, MIN_PROFILE_CHUNK_ROWS))} requests) and {_size(fixed)} for the "
        "search's and the replay's windows, the per-window series and the profile's time grids"
    )
    sampled_need = BASELINE_BYTES + SAMPLED_BYTES_PER_REQUEST * requests + profile_bytes
    # Advice before an exact curve: when the exact curve leaves no room for the profile (and the
    # search and replay on its columns) but a sampled one would, sample.
    exact_first = exact_stream + profile_bytes <= memory_limit_bytes or (
        sampled_need > memory_limit_bytes
    )

    if (exact_stream <= memory_limit_bytes and exact_first) or block_accesses == 0:
        return ScalePlan(
            mode="streaming",
            sample_rate=None,
            **advice(exact_stream),  # fmt: skip
            profile_counts=(
                f"{_size(BASELINE_BYTES)} baseline, {EXACT_BYTES_PER_REQUEST} B per request and "
                f"{EXACT_BYTES_PER_ACCESS} B per block access for the exact curve, {profile_part}"
            ),
            reason=(
                f"the whole trace needs {_size(in_memory)} > the memory limit "
                f"{_size(memory_limit_bytes)}: streamed; the exact curve fits "
                f"({_size(exact_stream)})"
            ),
            **common,
        )
    rate = _sample_rate(requests, block_accesses, memory_limit_bytes)
    # The sampled state is freed before the profile runs; the curve keeps per-request tokens.
    why = (
        f"the exact curve needs {_size(exact_stream)} > the memory limit "
        f"{_size(memory_limit_bytes)}"
        if exact_stream > memory_limit_bytes
        else f"the exact curve ({_size(exact_stream)}) leaves no room in the memory limit "
        f"{_size(memory_limit_bytes)} for the stage profile and the search beside it "
        f"({_size(exact_stream + profile_bytes)} in all)"
    )
    return ScalePlan(
        mode="streaming",
        sample_rate=rate,
        **advice(BASELINE_BYTES + SAMPLED_BYTES_PER_REQUEST * requests),  # fmt: skip
        profile_counts=(
            f"{_size(BASELINE_BYTES)} baseline, {SAMPLED_BYTES_PER_REQUEST} B per request kept "
            f"by the sampled curve, {profile_part}"
        ),
        reason=f"{why}: SHARDS spatial sampling at rate {number(rate)}",
        **common,
    )


def _sample_rate(requests: int, block_accesses: int, memory_limit_bytes: int) -> float:
    """The largest SHARDS rate whose sampled state fits beside the curve's per-request part.

    Raises ConfigError, naming the limit that would do, when even :data:`MIN_SAMPLE_RATE`
    does not fit.
    """
    gib = 1024**3
    room = memory_limit_bytes - BASELINE_BYTES - SAMPLED_BYTES_PER_REQUEST * requests
    rate = room / (SAMPLED_BYTES_PER_ACCESS * max(block_accesses, 1))
    if rate < MIN_SAMPLE_RATE:
        need = (
            BASELINE_BYTES
            + SAMPLED_BYTES_PER_REQUEST * requests
            + SAMPLED_BYTES_PER_ACCESS * MIN_SAMPLE_RATE * block_accesses
        )
        # Rounded up, so the size suggested is itself enough.
        least_gib = math.ceil(need / gib * 100) / 100
        raise ConfigError(
            f"--memory-limit {_size(memory_limit_bytes)} is too small for "
            f"{plural(requests, 'request')} and "
            f"{plural(block_accesses, 'block access', 'block accesses')} even sampling at rate "
            f"{number(MIN_SAMPLE_RATE)}; give at least {least_gib:.2f} GiB"  # exact: typed back
        )
    return readable_rate(rate)


def plan_for_stream(stream: TraceStream, memory_limit_bytes: int) -> ScalePlan:
    """:func:`plan_analysis` from a stream's footer sizes (accesses are an upper bound)."""
    return plan_analysis(
        stream.requests,
        stream.block_accesses,
        stream.table_bytes,
        memory_limit_bytes,
        stream.duration_s,
    )


def _prefix_section(
    result: PrefixCacheResult,
    options: AnalyzeOptions,
    plan: ScalePlan,
    kv_bytes_per_token: int | None = None,
) -> PrefixCache:
    note = (
        f"streamed ({plan.reason})"
        if result.exact
        else f"curve estimated by spatial hash sampling (SHARDS) because {plan.reason}"
    )
    # Capacities in bytes at the model's KV size, as the in-memory analysis reports them.
    kv = kv_bytes_per_token or kv_bytes_per_token_for(
        options.profile_options(), catalogs=options.perf_catalogs
    )
    return result_section(
        result,
        warmup_fraction=options.warmup_fraction,
        tiers=options.cache_tiers,
        kv_bytes_per_token=kv,
        note=note,
    )


# The stage profiler needs only per-request columns: a second pass reads them, a chunk of
# consecutive requests at a time (sections/chunkprofile.py) unless the whole trace fits one
# chunk; the search and the replay read only their windows' rows again (pipeline/windows.py).
PROFILE_COLUMNS = (
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "ttft_s",
    "e2e_s",
    "queue_s",
    "tpot_s",
    "ok",
    "model",
)
# A profile chunk holds its columns twice (this chunk and the next), its context rows, the
# profiler's arrays and the chunk's sums' temporaries; the profiler's time grids (2^20 cells,
# several arrays) are the same size for any chunk. Measured on the 5M-request synth trace
# (docs/benchmarks.md 4): 368 MiB over the baseline for chunks of 262,144 rows and 886 MiB for
# 1,048,576 (each with 2 x 32,768 context rows): 690 B per row and 152 MiB fixed. Planned with
# headroom at 768 B per row and 192 MiB.
CHUNK_BYTES_PER_ROW = 768
PROFILE_GRID_BYTES = 192 * 1024**2
# Chunks of at most 1M requests (the profile's 2^20-cell grid is then as fine as in memory for
# a 1M-request trace), at least 32,768 (else the context rows would dominate).
MAX_PROFILE_CHUNK_ROWS = 1 << 20
MIN_PROFILE_CHUNK_ROWS = 1 << 15
# Requests before and after a chunk profiled as its context: at the benchmark's 1,000 requests
# per second, 33 s of decodes overlapping the chunk's edges.
PROFILE_CONTEXT_ROWS = 1 << 15
# Per window of the profile's series (write and read bytes and I/Os, in flight, peak batch,
# grown by doubling): 6 float64 twice.
BYTES_PER_WINDOW = 96
# The search replays a window of SEARCH_REQUESTS and checks the whole trace up to
# VERIFY_REQUESTS (else a second window); planned, as the replay's window, at the in-memory
# figures.
SEARCH_WINDOW_REQUESTS = SEARCH_REQUESTS + VERIFY_REQUESTS


def advice_fixed_bytes(requests: int, accesses_per_request: float, duration_s: float) -> int:
    """The bounded parts of streamed advice: search, replay window, series, profile grids."""
    windows = max(duration_s, 0.0) / 1.0 + 1  # the default 1 s window (--window)
    rows = min(requests, REPLAY_WINDOW_REQUESTS) + min(requests, SEARCH_WINDOW_REQUESTS)
    per_row = IN_MEMORY_BYTES_PER_REQUEST + IN_MEMORY_BYTES_PER_ACCESS * accesses_per_request
    return int(rows * per_row + BYTES_PER_WINDOW * windows + PROFILE_GRID_BYTES)


# The replay of the verdict on a streamed trace larger than `analyze` replays whole: the
# busiest window of this many consecutive requests (analyze's --replay-max-requests default).
REPLAY_WINDOW_REQUESTS = 200_000


def _stage_profile(
    stream: TraceStream,
    options: AnalyzeOptions,
    result: PrefixCacheResult | None,
    plan: ScalePlan,
    totals: Totals,
) -> tuple[StageProfile, Trace | None] | None:
    """The stage profile of a streamed trace and the per-request columns it read, if held.

    None when not even a chunk fits the plan. A trace no larger than a chunk is profiled
    whole, exactly as in memory, and its columns (as a Trace) serve the search's choice of
    window and the request rows; a larger one in chunks (:mod:`kvadvisor.sections.chunkprofile`),
    holding no per-request column (None).
    """
    if not plan.stage_profile:
        return None
    models = listed_models(totals.models)
    narrow = stream.select(PROFILE_COLUMNS)
    if stream.requests > plan.profile_chunk_rows:
        hits = None if result is None else result.hit_tokens
        source = (
            "prefix-cache simulation (unbounded capacity)"
            if hits is not None
            else ("cached_tokens" if "cached_tokens" in stream.columns else None)
        )
        rows = plan.profile_chunk_rows
        stages = profile_chunks(
            profile_chunks_of(narrow, rows, min(PROFILE_CONTEXT_ROWS, rows), models, hits),
            options.profile_options(),
            models=models,
            mean_context_tokens=(totals.input_tokens + totals.output_tokens)
            / max(totals.requests, 1),
            hits_source=source,
            catalogs=options.perf_catalogs,
        )
        return stages, None
    table = pa.Table.from_batches(list(narrow))
    trace = Trace(
        table=table,
        block_tokens=stream.block_tokens,
        source_format=stream.source_format,
        source_path=stream.path,
        arrivals_measured=stream.arrivals_measured,
    )
    hits, source = prefix_hits(trace, result)
    stages = profile_workload(
        ProfileInputs.of(trace, models=models),
        options.profile_options(),
        hit_tokens=hits,
        hits_source=source,
        catalogs=options.perf_catalogs,
    )
    return stages, trace


def _streamed_context(
    options: AnalyzeOptions, inputs: AdvisorInputs, totals: Totals
) -> ContextCheck:
    """The context check over the streamed lengths; leaving requests out needs the trace whole.

    A streamed pass has already counted every request, so a decision that excludes some
    (``exclude``, or ``auto``/``rope`` with requests longer than any served context) is refused
    with one line rather than reported over requests the engine would refuse.
    """
    models = listed_models(totals.models)
    name = options.model or trace_model_name(models, inputs.perf) or DEFAULT_MODEL
    lengths = totals.request_lengths
    check = decide_context(
        inputs.perf.resolve_model(name), options.over_context, lengths.values, lengths.counts
    )
    if check.excluded:
        raise ConfigError(
            f"{check.statement}; a streamed trace cannot leave requests out: read it in memory "
            "(a larger --memory-limit) or give --over-context refuse"
        )
    return check


def analyze_stream(
    stream: TraceStream,
    options: AnalyzeOptions | None = None,
    *,
    plan: ScalePlan,
    version: str,
    generated_at: str,
    trace_sha256: str | None = None,
) -> AdviceReport:
    """Summary and prefix-cache curve in one pass per ``plan``; profile, search, replay if they fit.

    The stage profile, the deployment search and the replay of its verdict run when the plan
    has room for the stage profile (``plan.stage_profile``).
    """
    options = options or AnalyzeOptions()
    columns = stream.columns  # all of them, for the summary, before narrowing the stream
    whole = stream  # the stage profile reads its own columns (measured latencies) from it
    stream = stream.select(STREAMED_COLUMNS)  # decode nothing the pass does not use
    phases.enter(phases.READING, "and the cache curves, in batches")
    result, totals = scan(
        stream,
        sample_rate=plan.sample_rate,
        warmup_fraction=options.warmup_fraction,
        executor=options.executor,
    )
    inputs = options.advisor_inputs or load_advisor_inputs()
    context = _streamed_context(options, inputs, totals)
    phases.enter(phases.PROFILE)
    profiled = _stage_profile(whole, options, result, plan, totals)
    stages, columns_read = profiled if profiled is not None else (None, None)
    kv = stages.model.kv_bytes_per_token if stages is not None else None
    prefix = (
        unknown_prefix_cache(options.warmup_fraction)
        if result is None
        else _prefix_section(result, options, plan, kv)
    )
    duration = (totals.last_arrival_s - (totals.first_arrival_s or 0.0)) if totals.requests else 0.0
    notes = list(stream.notes)
    notes.append(
        f"streamed in {plural(totals.batches, 'record batch', 'record batches')} from "
        f"{plural(len(stream.files), 'file')}: {plan.reason}"
    )
    if stream.arrival_offset_s:
        notes.append(shifted_note(stream.arrival_offset_s))
    summary = TraceSummary(
        path=stream.path,
        format=stream.source_format,
        requests=totals.requests,
        duration_s=duration,
        block_tokens=stream.block_tokens,
        columns=columns,
        input_tokens_total=totals.input_tokens,
        output_tokens_total=totals.output_tokens,
        # As Trace.arrival_rate_per_s: unknown when the files say arrivals were not measured.
        arrival_rate_per_s=(
            totals.requests / duration if duration > 0 and stream.arrivals_measured else None
        ),
        dropped=dict(stream.dropped),
        notes=tuple(notes),
        # Columns count as holding values when the files have them (footers do not say
        # whether a column is all null, which the in-memory path checks).
        capabilities=capabilities_of(
            columns,
            stream.block_tokens,
            arrivals_measured=stream.arrivals_measured,
            failed_requests=totals.failed_requests,
        ),
        sha256=trace_sha256,
        models=listed_models(totals.models),
        arrivals=totals.arrivals(),
        input_tokens_hist=totals.histogram("input"),
        output_tokens_hist=totals.histogram("output"),
        input_tokens_stats=length_summary(totals.input_lengths.stats()),
        output_tokens_stats=length_summary(totals.output_lengths.stats()),
    )
    meta = Meta(FORMAT_VERSION, version, generated_at)
    report = AdviceReport(
        meta=meta, trace=summary, prefix_cache=prefix, options=options_record(options)
    )
    if stages is not None:
        report = replace(report, model=stages.model, stage_split=stages.stage_split, io=stages.io)
    inputs = options.advisor_inputs or load_advisor_inputs()
    options = replace(options, advisor_inputs=inputs)
    # The whole trace's rows are read (once) only when the search or the replay asks for them;
    # the replay reuses the exact pass's block ids, as in memory.
    rows = whole_source(whole, result if plan.exact_curve else None)
    view: TraceView | None = None
    if columns_read is not None:
        view = stream_view(whole, columns_read, rows)
    elif stages is not None:
        longest = (
            int(totals.request_lengths.values.max(initial=0)),
            int(totals.input_lengths.values.max(initial=0)),
        )
        view = StreamedView(whole, longest, rows)
    # Before the advice, which reads the retention facts (as in memory); the exact extras read
    # the whole rows the search and the replay then share.
    report = add_extras(report, whole, result, options, plan.extras, rows)
    report = advise_sections(report, options, inputs, stages=stages, view=view)
    if view is not None:
        phases.enter(phases.REPLAY)
        report = _replay(report, options, plan, columns_read, rows, stages, view, whole)
        report = refresh_advice(report, options, inputs, stages)
    report = with_context(report, context)
    why = unavailable_reasons(stream, report)
    if not plan.stage_profile:
        reason = (
            f"the stage profile, the deployment search and the replay of "
            f"{plural(stream.requests, 'request')} need about {_size(plan.profile_bytes)} "
            f"({plan.profile_counts}), over the memory limit {_size(plan.memory_limit_bytes)}; "
            "raise --memory-limit to include them"
        )
        why.update({k: reason for k in ("model", "stage_split", "io", "replay") if k in why})
    return replace(report, versions=data_versions(inputs), unavailable=why)


# The replay of the verdict holds the whole trace's rows as `analyze` in memory does, less the
# arrow table: the in-memory figures per request and per block access count every analysis's
# passes (routing, reuse times, block sizes), so they bound the replay's arrays and LRU passes.
def replay_bytes(requests: int, block_accesses: int) -> int:
    """The memory the streamed replay of ``requests`` whole-trace rows is planned with."""
    return (
        BASELINE_BYTES
        + IN_MEMORY_BYTES_PER_REQUEST * requests
        + IN_MEMORY_BYTES_PER_ACCESS * block_accesses
    )


def _replay(
    report: AdviceReport,
    options: AnalyzeOptions,
    plan: ScalePlan,
    columns: Trace | None,
    rows: Callable[[], tuple[Trace, ReplaySource]],
    stages: StageProfile | None,
    view: TraceView,
    stream: TraceStream,
) -> AdviceReport:
    """The verdict replayed on the whole trace when `analyze` would and it fits, else a window.

    The whole trace's rows are read only when `analyze` would replay them in memory
    (``--replay-max-requests``) and they fit the memory limit; otherwise the busiest window of
    at most :data:`REPLAY_WINDOW_REQUESTS` consecutive requests is read and replayed (from
    empty caches), and the replay's notes say what it covers.
    """
    calibration = stages.calibration if stages is not None else None
    # Neither reads the whole trace's rows: with nothing to replay, reading them is wasted.
    left_out = (
        "not asked for (--no-replay)"
        if not options.replay
        else "no deployment was searched (--no-search)"
        if not options.search
        else None
    )
    if left_out is not None:
        return replace(
            report,
            unavailable={**report.unavailable, "replay": left_out},
            request_rows={} if columns is None else trace_rows(columns),
        )
    need = replay_bytes(plan.requests, plan.block_accesses)
    # The plan holds room for a window's rows (advice_fixed_bytes): the whole trace when it
    # is no longer, or when its own rows fit the limit too.
    size = min(REPLAY_WINDOW_REQUESTS, options.replay_max_requests)
    if plan.requests <= size or (
        plan.requests <= options.replay_max_requests and need <= plan.memory_limit_bytes
    ):
        trace, source = rows()
        return replay_recommendation(trace, report, options, source, calibration)
    start, stop = view.busiest(size)
    window = stream_rows(stream, start, stop)
    windowed = replay_recommendation(
        window, report, replace(options, replay_max_requests=size), None, calibration
    )
    if windowed.replay is None:
        return replace(windowed, request_rows={})
    t0, t1 = view.arrival_at(start) - view.arrival_at(0), view.arrival_at(stop - 1)
    why = (
        f"more than `analyze` replays whole ({count(options.replay_max_requests)}, "
        "--replay-max-requests)"
        if plan.requests > options.replay_max_requests
        else f"more than the {count(size)} the memory plan holds for a replay (replaying them "
        f"whole needs {_size(need)}, over the memory limit)"
    )
    note = (
        f"replayed on the busiest window of {count(size)} consecutive requests (rows "
        f"{count(start)} to {count(stop - 1)}, arriving from {format_value(t0, Unit.SECONDS)} "
        f"over {format_value(t1 - view.arrival_at(start), Unit.SECONDS)}), starting from empty "
        f"caches: the trace's {count(plan.requests)} requests are {why}"
    )
    replayed = replace(windowed.replay, notes=(*windowed.replay.notes, note))
    request_rows = dict(windowed.request_rows)
    if "request" in request_rows:
        request_rows["request"] = np.asarray(request_rows["request"]) + start
    return replace(windowed, replay=replayed, request_rows=request_rows)
