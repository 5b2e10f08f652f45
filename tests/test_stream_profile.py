"""The stage profile in chunks (a trace larger than memory) against the profile of the whole.

Figures that do not depend on the decode batch (prefill times, every I/O figure) are equal;
those that do, and the sketched quantiles, are within the error docs/scale.md states.
"""

from __future__ import annotations

import numpy as np
import pytest
from advice_traces import shared_traces
from conftest import REPO

from kvadvisor.cache.prefix import simulate_arrays
from kvadvisor.metrics import trace_hit_tokens
from kvadvisor.metrics.sketch import RELATIVE_ERROR, QuantileSketch
from kvadvisor.pipeline.profilechunks import profile_chunks_of
from kvadvisor.pipeline.streaming import PROFILE_COLUMNS
from kvadvisor.sections.chunkprofile import profile_chunks
from kvadvisor.sections.profile import ProfileInputs, ProfileOptions, profile_workload
from kvadvisor.sections.workload import trace_models
from kvadvisor.trace import read_trace
from kvadvisor.trace.stream import stream_trace

SAMPLES = REPO / "sample_traces"
# The shared copies of these two published files are left out by their checksum
# (tests/advice_traces.py): the same requests, profiled twice. Any other shared trace is kept.
TRACES = [
    SAMPLES / "mooncake_conversation.parquet",
    SAMPLES / "azure_code.csv.zst",
    *shared_traces(),
]
# Measured on these traces in chunks of 3,000 requests with 3,000 context rows each side: the
# decode-side sums and means within 1.0e-4 (relative; the mean decode batch on the Azure code
# trace), quantiles over requests within 1.0% (the sketch's 0.5% and the rank it answers for,
# against numpy's interpolated percentile), the peak decode KV per GPU within 1.6% (a maximum
# over grid cells, which are finer per chunk). The bounds keep a margin (docs/scale.md).
SUM_ERROR = 1e-3
QUANTILE_ERROR = 0.05
PEAK_ERROR = 0.05


def _close(got: float | None, want: float | None, rel: float) -> bool:
    if want is None or got is None:
        return got == want
    return abs(got - want) <= rel * max(abs(want), 1e-12)


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name)
def profiles(request):
    """The whole profile and the chunked one of a trace, on the same prefix hits."""
    trace = read_trace(request.param)
    if trace.has_hashes:
        offsets, values = trace.hash_arrays()
        n = trace.column_np("input_tokens").astype(np.int64)
        sim = simulate_arrays(
            offsets, values, n, int(trace.block_tokens), warmup_requests=0, warmup_fraction=0.0
        )
        hits, source = np.asarray(sim.hit_tokens, np.float64), "prefix-cache simulation"
    else:
        hits = trace_hit_tokens(trace)
        source = None if hits is None else "cached_tokens"
    options = ProfileOptions()
    models = trace_models(trace)
    whole = profile_workload(
        ProfileInputs.of(trace, models=models), options, hit_tokens=hits, hits_source=source
    )
    context = trace.column_np("input_tokens") + trace.column_np("output_tokens")
    stream = stream_trace(trace, batch_rows=997).select(PROFILE_COLUMNS)
    chunked = profile_chunks(
        profile_chunks_of(stream, 3000, 3000, models, hits),
        options,
        models=models,
        mean_context_tokens=float(np.mean(context)),
        hits_source=source,
    )
    return trace, whole, chunked


def test_the_trace_was_cut_into_chunks(profiles) -> None:
    """Every trace here is longer than one chunk, and the split's notes say it was chunked."""
    trace, _, got = profiles
    chunks = -(-trace.requests // 3000)
    assert chunks > 1
    assert any(f"profiled in {chunks} chunks" in n for n in got.stage_split.notes)


def test_prefill_and_io_figures_are_exact(profiles) -> None:
    """What depends on prefill alone: equal to the whole profile (summation order aside)."""
    _, want, got = profiles
    w, g = want.stage_split, got.stage_split
    for name in ("prefill_s", "latency_prefill_s", "no_reuse_prefill_s"):
        assert _close(getattr(g, name), getattr(w, name), 1e-9), name
    assert sum(g.request_classes.values()) == sum(w.request_classes.values())
    assert g.measured_requests == w.measured_requests
    assert g.per_request["prefill_gpu_s"]["max"] == w.per_request["prefill_gpu_s"]["max"]
    assert _close(g.per_request["ttft_s"]["mean"], w.per_request["ttft_s"]["mean"], 1e-9)
    assert got.io.read_known == want.io.read_known
    for side in ("write", "read"):
        rw, rg = getattr(want.io, side), getattr(got.io, side)
        for name in ("mean_bytes_per_s", "p50_bytes_per_s", "p99_bytes_per_s", "peak_bytes_per_s"):
            assert _close(getattr(rg, name), getattr(rw, name), 1e-9), (side, name)
        assert _close(rg.bytes_total, rw.bytes_total, 1e-9)
        pw, pg = getattr(want.io, f"{side}_io"), getattr(got.io, f"{side}_io")
        if pw is None:
            assert pg is None
            continue
        assert (pg.ios, pg.full_chunk_ios, pg.partial_chunk_ios) == (
            pw.ios,
            pw.full_chunk_ios,
            pw.partial_chunk_ios,
        )
        assert _close(pg.device_bytes, pw.device_bytes, 1e-9)
        assert _close(pg.p99_iops, pw.p99_iops, 1e-9) and pg.peak_iops == pw.peak_iops
        # The median bytes per token is sketched (exact when every request has the same).
        assert _close(pg.full_chunk_bytes, pw.full_chunk_bytes, RELATIVE_ERROR)
    shares = [t.hit_token_share_below for t in got.io.load_vs_recompute]
    assert shares == pytest.approx([t.hit_token_share_below for t in want.io.load_vs_recompute])
    mw, mg = want.model.memory, got.model.memory
    assert _close(mg.mean_context_tokens, mw.mean_context_tokens, 1e-9)


def test_decode_figures_within_the_stated_error(profiles) -> None:
    """The decode batch is seen per chunk: its figures move by less than SUM_ERROR."""
    _, want, got = profiles
    w, g = want.stage_split, got.stage_split
    for name in ("decode_s", "latency_decode_s", "mean_decode_batch", "gpu_busy_fraction"):
        assert _close(getattr(g, name), getattr(w, name), SUM_ERROR), name
    assert g.classification == w.classification
    for key, dist in w.per_request.items():
        for stat in ("p50", "p90", "p99", "max"):
            assert _close(g.per_request[key][stat], dist[stat], QUANTILE_ERROR), (key, stat)
    for fact in ("inflight_requests_p99", "kv_inflight_gib_p99"):
        assert _close(got.facts[fact], want.facts[fact], SUM_ERROR), fact
    peak_w = want.model.memory.kv_working_set_peak_bytes_per_gpu
    peak_g = got.model.memory.kv_working_set_peak_bytes_per_gpu
    assert _close(peak_g, peak_w, PEAK_ERROR)


def test_sketch_quantiles_within_the_stated_error() -> None:
    """On real values: each quantile within RELATIVE_ERROR of the value at its rank."""
    trace = read_trace(SAMPLES / "mooncake_conversation.parquet")
    arrival = trace.column_np("arrival_s")
    for values in (trace.column_np("input_tokens").astype(float), np.diff(arrival)):
        sketch = QuantileSketch()
        for part in np.array_split(values, 7):
            sketch.add(part)
        ordered = np.sort(values)
        for q in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
            want = ordered[int(np.floor(q * (len(values) - 1)))]
            assert _close(sketch.quantile(q), want, RELATIVE_ERROR), q
        d = sketch.distribution()
        assert d.max == ordered[-1] and _close(d.mean, float(values.mean()), 1e-12)
    constant = QuantileSketch()
    constant.add(np.full(10, 83886080.0 / 256))
    assert constant.quantile(0.5) == 83886080.0 / 256
