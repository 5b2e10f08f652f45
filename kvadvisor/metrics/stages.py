"""Per-request prefill and decode times, GPU-time split (batch-aware) and latency split, vectorised.

Definitions (docs/stage-profiler.md has them with formulas):

* A request with ``n`` prompt tokens, ``h`` of them prefix hits, and ``o`` output tokens prefills
  ``m = max(n - h, 1)`` new tokens (engines recompute at least the last token) after ``n - m``
  cached ones; the prefill produces the first output token, so decode runs ``o - 1`` steps.
* Prefill runs from arrival + queueing; decode from the end of prefill for ``o - 1`` steps.
* In-flight decode count ``B(t)`` and the KV those requests hold ``K(t)`` come from the trace's
  arrivals and these intervals; a decode step's latency depends on them and they depend on the
  latencies, so the model iterates a fixed number of times (``iterations``).
* GPU time of a decode: each step serves the whole batch, so a request is charged its share
  (measured rows: ``integral of dt / B(t)`` over its decode; modeled rows: the cost model's
  batch-aware share). GPU time of a prefill: measured ``integral of dt / P(t)`` with ``P`` the
  concurrent prefills; modeled, the prefill time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kvadvisor.metrics.timeline import DEFAULT_CELLS, TimeGrid

DEFAULT_ITERATIONS = 3
GRID_HEADROOM = 1.25  # the first grid spans 1.25 x the first estimate of the last completion


class StageCostModel(Protocol):
    """What the stage profiler needs from a performance model (perfmodel.PerfModel fits)."""

    def prefill_s(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Prefill latency per request, s."""

    def decode_step_s(self, batch: np.ndarray, batch_kv_rank_bytes: np.ndarray) -> np.ndarray:
        """One decode step's latency, s, for a batch of ``batch`` requests holding that KV."""

    def decode_gpu_s(
        self, input_tokens: np.ndarray, steps: np.ndarray, harmonic_batch: np.ndarray
    ) -> np.ndarray:
        """Batch-aware GPU time charged to each request's decode, s."""

    def kv_rank_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """KV bytes per GPU rank for contexts of ``tokens`` tokens."""


@dataclass(frozen=True)
class MeasuredStages:
    """Stage latencies measured by the engine or benchmark, NaN where a row has none.

    ``prefill_s`` = TTFT - queueing; ``decode_s`` = end-to-end - TTFT; ``queue_s`` may be all 0.
    """

    prefill_s: np.ndarray
    decode_s: np.ndarray
    queue_s: np.ndarray

    @property
    def rows(self) -> np.ndarray:
        """Rows with both stage latencies measured."""
        return np.isfinite(self.prefill_s) & np.isfinite(self.decode_s)


@dataclass(frozen=True)
class StageTimes:
    """Per-request stage times (arrays of one value per request, seconds)."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hit_tokens: np.ndarray
    queue_s: np.ndarray
    prefill_s: np.ndarray  # latency
    decode_s: np.ndarray  # latency
    prefill_gpu_s: np.ndarray
    decode_gpu_s: np.ndarray
    prefill_gpu_no_reuse_s: np.ndarray  # prefill GPU time had no prefix been reused
    mean_batch: np.ndarray  # time-mean decode batch over the request's decode
    mean_batch_kv_rank_bytes: np.ndarray  # time-mean KV per rank of that batch
    harmonic_batch: np.ndarray
    measured: np.ndarray  # bool: stage latencies from the trace
    grid: TimeGrid  # the time grid the batch statistics were computed on
    decode_batch_cells: np.ndarray  # mean decode batch per instance in each grid cell
    decode_kv_rank_cells: np.ndarray  # mean KV per rank held by decoding requests, per instance
    iterations: int
    instances: int  # model instances the load was spread over

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token: queueing + prefill, s."""
        return self.queue_s + self.prefill_s

    @property
    def prefill_start_s(self) -> np.ndarray:
        """When prefill starts (after queueing), s since the first arrival."""
        return self.arrival_s + self.queue_s

    @property
    def prefill_end_s(self) -> np.ndarray:
        """When prefill completes (its KV can be written), s."""
        return self.arrival_s + self.ttft_s

    @property
    def active_span_s(self) -> float:
        """From the first arrival to the last completion, s (0 for an empty trace)."""
        if len(self.arrival_s) == 0:
            return 0.0
        return float(self.end_s.max() - self.arrival_s.min())

    @property
    def end_s(self) -> np.ndarray:
        """When the request completes, s."""
        return self.prefill_end_s + self.decode_s


def stage_times(
    arrival_s: np.ndarray,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    cost: StageCostModel,
    *,
    hit_tokens: np.ndarray | None = None,
    measured: MeasuredStages | None = None,
    iterations: int = DEFAULT_ITERATIONS,
    cells: int = DEFAULT_CELLS,
    instances: int = 1,
    max_batch: float | None = None,
) -> StageTimes:
    """Per-request stage latencies and GPU times; measured where the trace has them.

    ``instances``: model instances sharing the trace's load evenly (a measured trace keeps the
    concurrency it was measured at). ``max_batch``: most requests one instance can decode at
    once (KV memory); None = no cap.
    """
    a = np.asarray(arrival_s, dtype=np.float64)
    n = np.asarray(input_tokens, dtype=np.float64)
    o = np.asarray(output_tokens, dtype=np.float64)
    h = np.zeros_like(n)
    if hit_tokens is not None:
        h = np.clip(np.asarray(hit_tokens, dtype=np.float64), 0, n)
    new = np.where(n > 0, np.maximum(n - h, 1.0), 0.0)
    cached = n - new
    steps = np.maximum(o - 1.0, 0.0)

    prefill_model = cost.prefill_s(new, cached)
    prefill_no_reuse = cost.prefill_s(n, np.zeros_like(n))
    if measured is not None:
        ok = measured.rows
        queue = np.where(ok, np.nan_to_num(measured.queue_s, nan=0.0), 0.0)
        prefill = np.where(ok, measured.prefill_s, prefill_model)
        decode_measured = np.where(ok, measured.decode_s, np.nan)
    else:
        ok = np.zeros(len(n), dtype=bool)
        queue = np.zeros_like(n)
        prefill = prefill_model
        decode_measured = np.full(len(n), np.nan)

    start = a + queue + prefill
    # Mean KV per rank a request holds during its decode (context n+1 .. n+o-1).
    own_kv = cost.kv_rank_bytes(n + 1.0 + np.maximum(steps - 1.0, 0.0) / 2.0)
    own_kv = np.where(steps > 0, own_kv, 0.0)
    ones = (steps > 0).astype(np.float64)
    ones_all = np.ones(len(n))
    decode = np.where(ok, decode_measured, steps * cost.decode_step_s(np.ones_like(n), own_kv))
    # Fixed point: intervals -> batch over time -> step latency -> intervals, a fixed number
    # of rounds. Batch and KV over time come from the open-time function on a time grid. The
    # trace's load is spread evenly over ``instances`` instances, and an engine never runs more
    # requests than fit in KV memory (``max_batch``): beyond that, requests wait.
    rounds = 1 if ok.all() else max(int(iterations), 1)
    inst = 1 if ok.all() else max(int(instances), 1)
    cap = np.inf if max_batch is None or ok.all() else max(float(max_batch), 1.0)
    grid: TimeGrid | None = None
    for _ in range(rounds):
        end = start + decode
        dur = end - start
        if grid is None or end.max(initial=0.0) > grid.span_s:
            # Room for the intervals to grow over the rounds without rebuilding the grid;
            # the starts' ramps only change with the grid.
            grid = TimeGrid.covering(GRID_HEADROOM * float(end.max(initial=0.0)), cells)
            at_start = grid.locate(start)
            start_batch, start_kv = grid.ramps(start, [ones, own_kv])
        at_end = grid.locate(end)
        end_batch, end_kv = grid.ramps(end, [ones, own_kv])
        batch_f = start_batch - end_batch
        kv_f = start_kv - end_kv
        per_instance = np.maximum(grid.mean(batch_f, at_start, at_end, dur) / inst, 1.0)
        mean_batch = np.minimum(per_instance, cap)
        scale = mean_batch / per_instance
        mean_kv = np.maximum(grid.mean(kv_f, at_start, at_end, dur) / inst * scale, own_kv)
        decode = np.where(ok, decode_measured, steps * cost.decode_step_s(mean_batch, mean_kv))
    # The batch statistics kept are those of the last round's intervals.
    batch_cells = grid.cell_means(batch_f)
    inverse = np.where(batch_cells > 0, 1.0 / np.maximum(batch_cells, 1.0), 0.0)
    inverse_f = grid.integrate_cells(inverse)
    inv_int = grid.at(inverse_f, at_end) - grid.at(inverse_f, at_start)
    harmonic = np.where((dur > 0) & (inv_int > 0), dur / np.where(inv_int > 0, inv_int, 1.0), 1.0)
    harmonic = np.clip(harmonic / inst, 1.0, cap)
    end = start + decode

    decode_gpu = np.where(ok, inv_int, cost.decode_gpu_s(n, steps, harmonic))
    decode_gpu = np.where(steps > 0, decode_gpu, 0.0)
    prefill_gpu = prefill.copy()
    if ok.any():
        p_start = a + queue
        pgrid = TimeGrid.covering(float(start.max(initial=0.0)), cells)
        p_cells = pgrid.cell_means(pgrid.open_time(p_start, start, ones_all))
        inv_p = pgrid.integrate_cells(np.where(p_cells > 0, 1.0 / np.maximum(p_cells, 1.0), 0.0))
        prefill_gpu = np.where(ok, pgrid.at(inv_p, start) - pgrid.at(inv_p, p_start), prefill_gpu)
    prefill_gpu_no_reuse = prefill_gpu + np.maximum(prefill_no_reuse - prefill_model, 0.0)
    return StageTimes(
        arrival_s=a,
        input_tokens=n,
        output_tokens=o,
        hit_tokens=h,
        queue_s=queue,
        prefill_s=prefill,
        decode_s=decode,
        prefill_gpu_s=prefill_gpu,
        decode_gpu_s=decode_gpu,
        prefill_gpu_no_reuse_s=prefill_gpu_no_reuse,
        mean_batch=mean_batch,
        mean_batch_kv_rank_bytes=mean_kv,
        harmonic_batch=harmonic,
        measured=ok,
        grid=grid,
        decode_batch_cells=batch_cells / inst,
        decode_kv_rank_cells=grid.cell_means(kv_f) / inst,
        iterations=rounds,
        instances=inst,
    )


# ---- summaries ------------------------------------------------------------------------------

PREFILL_DOMINATED_SHARE = 0.6
DECODE_DOMINATED_SHARE = 0.4


def classify(prefill_share: float) -> str:
    """prefill-dominated at a prefill share >= 0.6, decode-dominated at <= 0.4, else balanced."""
    if prefill_share >= PREFILL_DOMINATED_SHARE:
        return "prefill-dominated"
    if prefill_share <= DECODE_DOMINATED_SHARE:
        return "decode-dominated"
    return "balanced"


@dataclass(frozen=True)
class Distribution:
    """Summary of a per-request quantity."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: np.ndarray) -> Distribution:
        """Summarise (NaN-free) values; zeros for an empty array."""
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        if len(v) == 0:
            return cls(0.0, 0.0, 0.0, 0.0, 0.0)
        p50, p90, p99 = np.percentile(v, [50, 90, 99])
        return cls(float(v.mean()), float(p50), float(p90), float(p99), float(v.max()))


@dataclass(frozen=True)
class SplitSummary:
    """Totals and shares of the two stages over a trace (GPU time and latency)."""

    prefill_gpu_s: float
    decode_gpu_s: float
    prefill_share: float  # of GPU time
    classification: str
    latency_prefill_s: float  # sum of TTFT (queue + prefill) over requests
    latency_decode_s: float
    latency_prefill_share: float
    latency_classification: str
    prefill_gpu_no_reuse_s: float
    prefill_share_no_reuse: float
    prefill_gpu_saved_by_reuse_s: float
    request_classes: dict[str, int]  # per-request GPU-time class counts
    prefill_gpu_per_request_s: Distribution
    decode_gpu_per_request_s: Distribution
    prefill_share_per_request: Distribution
    ttft_s: Distribution
    decode_latency_s: Distribution
    mean_decode_batch: float
    measured_requests: int
    instances: int
    gpu_busy_fraction: float | None  # GPU time / (instances x active span)


def _share(a: float, b: float) -> float:
    return a / (a + b) if a + b > 0 else 0.0


def summarize_split(t: StageTimes) -> SplitSummary:
    """Totals, shares (GPU time and latency), classification and distributions."""
    p, d = float(t.prefill_gpu_s.sum()), float(t.decode_gpu_s.sum())
    lp, ld = float(t.ttft_s.sum()), float(t.decode_s.sum())
    p0 = float(t.prefill_gpu_no_reuse_s.sum())
    per_total = t.prefill_gpu_s + t.decode_gpu_s
    per_share = np.divide(
        t.prefill_gpu_s, per_total, out=np.zeros_like(per_total), where=per_total > 0
    )
    cls_counts = {
        "prefill-dominated": int(np.count_nonzero(per_share >= PREFILL_DOMINATED_SHARE)),
        "decode-dominated": int(np.count_nonzero(per_share <= DECODE_DOMINATED_SHARE)),
    }
    cls_counts["balanced"] = len(per_share) - sum(cls_counts.values())
    decoding = t.output_tokens > 1
    span = t.active_span_s
    share = _share(p, d)
    lshare = _share(lp, ld)
    return SplitSummary(
        prefill_gpu_s=p,
        decode_gpu_s=d,
        prefill_share=share,
        classification=classify(share),
        latency_prefill_s=lp,
        latency_decode_s=ld,
        latency_prefill_share=lshare,
        latency_classification=classify(lshare),
        prefill_gpu_no_reuse_s=p0,
        prefill_share_no_reuse=_share(p0, d),
        prefill_gpu_saved_by_reuse_s=p0 - p,
        request_classes=cls_counts,
        prefill_gpu_per_request_s=Distribution.of(t.prefill_gpu_s),
        decode_gpu_per_request_s=Distribution.of(t.decode_gpu_s),
        prefill_share_per_request=Distribution.of(per_share),
        ttft_s=Distribution.of(t.ttft_s),
        decode_latency_s=Distribution.of(t.decode_s),
        mean_decode_batch=float(t.mean_batch[decoding].mean()) if decoding.any() else 0.0,
        measured_requests=int(np.count_nonzero(t.measured)),
        instances=t.instances,
        gpu_busy_fraction=(p + d) / (t.instances * span) if span > 0 else None,
    )
