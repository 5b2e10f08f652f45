"""The stage split, concurrency and I/O demand summed over chunks of a trace, in bounded memory.

A trace too large to hold per request is profiled in chunks of consecutive requests
(``sections.profile.profile_chunks``); each chunk's :class:`StageTimes` (its own rows only)
are added here, and what the report needs is kept as sums, per-window arrays (one value per
window of ``window_s``, so bounded by the span, not the requests: at most
``timeline.MAX_WINDOWS``) and quantile sketches. Sums and per-window series are exact for the
per-request times given; quantiles over requests are within ``sketch.RELATIVE_ERROR``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kvadvisor.metrics.io import ChunkIo, IoProfile, RateStats, StageIo, _pieces
from kvadvisor.metrics.sketch import QuantileSketch
from kvadvisor.metrics.stages import (
    DECODE_DOMINATED_SHARE,
    PREFILL_DOMINATED_SHARE,
    SplitSummary,
    StageTimes,
    _share,
    classify,
)
from kvadvisor.metrics.timeline import TimeGrid, window_count
from kvadvisor.units import S_PER_DAY


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    return a if a.size >= size else np.concatenate([a, np.zeros(max(size, 2 * a.size) - a.size)])


def _add_at(total: np.ndarray, first: int, part: np.ndarray, how: str = "sum") -> np.ndarray:
    """``total`` (grown as needed) with ``part`` added (or maxed) from window ``first`` on."""
    total = _grown(total, first + part.size)
    view = total[first : first + part.size]
    if how == "max":
        np.maximum(view, part, out=view)
    else:
        view += part
    return total


@dataclass
class _Direction:
    """One I/O direction: totals, the I/O pattern's sums, per-window bytes and I/Os."""

    bytes_total: float = 0.0
    ios: int = 0
    full: int = 0
    partial: int = 0
    device: float = 0.0
    per_token: QuantileSketch = field(default_factory=QuantileSketch)
    bytes_w: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ios_w: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def add(
        self,
        lo: np.ndarray,
        hi: np.ndarray,
        nbytes: np.ndarray,
        at_s: np.ndarray,
        window_s: float,
        chunk_tokens: int,
        io_unit_bytes: int,
    ) -> None:
        """As ``io.chunk_io`` and ``io.io_demand`` compute them, summed into this direction."""
        head, full, tail = _pieces(lo, hi, chunk_tokens)
        tokens = (head + full * chunk_tokens + tail).astype(np.float64)
        per_token = np.divide(nbytes, tokens, out=np.zeros_like(tokens), where=tokens > 0)
        ios = (head > 0).astype(np.int64) + full + (tail > 0).astype(np.int64)
        u = float(io_unit_bytes)

        def rounded(t: np.ndarray) -> np.ndarray:
            return np.ceil(t * per_token / u) * u

        device = rounded(head) + full * rounded(np.full_like(head, chunk_tokens)) + rounded(tail)
        self.bytes_total += float(np.sum(nbytes))
        self.ios += int(ios.sum())
        self.full += int(full.sum())
        self.partial += int(np.count_nonzero(head) + np.count_nonzero(tail))
        self.device += float(device.sum())
        self.per_token.add(per_token[tokens > 0])
        bins = (np.asarray(at_s) // window_s).astype(np.int64)
        if bins.size:
            first = int(bins.min())
            self.bytes_w = _add_at(self.bytes_w, first, np.bincount(bins - first, nbytes))
            self.ios_w = _add_at(
                self.ios_w, first, np.bincount(bins - first, ios.astype(np.float64))
            )

    def stage(self, windows: int, window_s: float, chunk_tokens: int) -> StageIo:
        """The direction as ``io.io_demand`` reports it, over ``windows`` windows."""
        rate = _grown(self.bytes_w, windows)[:windows] / window_s
        iops = _grown(self.ios_w, windows)[:windows] / window_s
        # The median bytes per token of the requests that moved any (sketched).
        median = self.per_token.quantile(0.5) if self.per_token.count else 0.0
        chunks = ChunkIo(
            ios=self.ios,
            full_chunk_ios=self.full,
            partial_chunk_ios=self.partial,
            bytes=self.bytes_total,
            mean_io_bytes=self.bytes_total / self.ios if self.ios else 0.0,
            full_chunk_bytes=median * chunk_tokens,
            device_bytes=self.device,
            write_amplification=self.device / self.bytes_total if self.bytes_total > 0 else None,
        )
        return StageIo(True, self.bytes_total, RateStats.of(rate), RateStats.of(iops), chunks, rate)


@dataclass
class ChunkedStages:
    """What the report keeps of every chunk's stage times, summed (see the module docstring).

    ``kv_bytes`` and ``kv_rank_bytes``: the (calibrated) model's KV bytes for contexts of n
    tokens, all ranks and one rank; ``breakevens``: the load-vs-recompute thresholds whose
    hit-token shares the report gives.
    """

    window_s: float
    chunk_tokens: int
    io_unit_bytes: int
    hits_known: bool
    kv_bytes: Callable[[np.ndarray], np.ndarray]
    breakevens: tuple[float | None, ...] = ()
    requests: int = 0
    chunks: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    measured: int = 0
    decoding: int = 0
    first_arrival_s: float = np.inf
    last_end_s: float = 0.0
    classes: np.ndarray = field(default_factory=lambda: np.zeros(2, np.int64))
    share_hist: np.ndarray = field(default_factory=lambda: np.zeros(10, np.int64))
    hits_below: np.ndarray = field(default_factory=lambda: np.zeros(0))
    peak_kv_rank: float = 0.0
    sketches: dict[str, QuantileSketch] = field(default_factory=dict)
    write: _Direction = field(default_factory=_Direction)
    read: _Direction = field(default_factory=_Direction)
    inflight_w: np.ndarray = field(default_factory=lambda: np.zeros(0))
    peak_batch_w: np.ndarray = field(default_factory=lambda: np.zeros(0))
    iterations: int = 0
    instances: int = 1

    def add(self, t: StageTimes, rows: slice, shift_s: float, core_s: tuple[float, float]) -> None:
        """Add the requests ``rows`` of chunk times ``t`` (computed on arrivals minus ``shift_s``).

        ``core_s``: the time range (shifted back) whose decode batches this chunk saw whole,
        so its per-window peaks are taken only there.
        """
        self.chunks += 1
        self.iterations, self.instances = t.iterations, t.instances
        n, o, h = t.input_tokens[rows], t.output_tokens[rows], t.hit_tokens[rows]
        pg, dg = t.prefill_gpu_s[rows], t.decode_gpu_s[rows]
        ttft, dec = t.ttft_s[rows], t.decode_s[rows]
        arrival = t.arrival_s[rows] + shift_s
        end = t.end_s[rows] + shift_s
        self.requests += int(n.size)
        for key, v in (
            ("prefill_gpu", pg),
            ("decode_gpu", dg),
            ("ttft", ttft),
            ("decode", dec),
            ("no_reuse", t.prefill_gpu_no_reuse_s[rows]),
            ("context", n + o),
            ("context_kv", self.kv_bytes(n + o)),
            ("hits", h),
        ):
            self.sums[key] = self.sums.get(key, 0.0) + float(v.sum())
        total = pg + dg
        share = np.divide(pg, total, out=np.zeros_like(total), where=total > 0)
        self.classes += [
            np.count_nonzero(share >= PREFILL_DOMINATED_SHARE),
            np.count_nonzero(share <= DECODE_DOMINATED_SHARE),
        ]
        self.share_hist += np.histogram(share, bins=10, range=(0.0, 1.0))[0]
        decoding = o > 1
        self.decoding += int(np.count_nonzero(decoding))
        self.sums["batch"] = self.sums.get("batch", 0.0) + float(t.mean_batch[rows][decoding].sum())
        self.measured += int(np.count_nonzero(t.measured[rows]))
        if n.size:
            self.first_arrival_s = min(self.first_arrival_s, float(arrival.min()))
            self.last_end_s = max(self.last_end_s, float(end.max()))
        for key, v in (
            ("prefill_gpu", pg),
            ("decode_gpu", dg),
            ("share", share),
            ("ttft", ttft),
            ("decode", dec),
        ):
            self.sketches.setdefault(key, QuantileSketch()).add(v)
        if self.hits_below.size != len(self.breakevens):
            self.hits_below = np.zeros(len(self.breakevens))
        for i, be in enumerate(self.breakevens):
            self.hits_below[i] += float(h.sum()) if be is None else float(h[h < be].sum())
        self._add_io(t, rows, shift_s, n, h)
        self._add_concurrency(t, arrival, end, shift_s, core_s)

    def _add_io(self, t: StageTimes, rows: slice, shift_s: float, n: np.ndarray, h: np.ndarray):
        ni = n.astype(np.int64)
        hi = np.clip(h.astype(np.int64), 0, ni) if self.hits_known else np.zeros_like(ni)
        kv_n, kv_h = self.kv_bytes(ni), self.kv_bytes(hi)
        args = (self.window_s, self.chunk_tokens, self.io_unit_bytes)
        write_at = t.prefill_end_s[rows] + shift_s
        self.write.add(hi, ni, np.maximum(kv_n - kv_h, 0.0), write_at, *args)
        if self.hits_known:
            read_at = t.prefill_start_s[rows] + shift_s
            self.read.add(np.zeros_like(hi), hi, kv_h, read_at, *args)

    def _add_concurrency(
        self,
        t: StageTimes,
        arrival: np.ndarray,
        end: np.ndarray,
        shift_s: float,
        core_s: tuple[float, float],
    ) -> None:
        w = self.window_s
        if arrival.size == 0:
            return
        # In flight per window is a sum over requests: each chunk adds its own rows exactly.
        first = int(arrival.min() // w)
        local = TimeGrid(w, int(end.max() // w) - first + 1)
        off = first * w
        inflight = local.cell_means(local.open_time(arrival - off, end - off))
        self.inflight_w = _add_at(self.inflight_w, first, inflight)
        # The peak decode batch per window, from this chunk's grid, where the chunk saw the
        # whole batch (its core); windows across two cores take the larger.
        self.peak_kv_rank = max(self.peak_kv_rank, float(t.decode_kv_rank_cells.max(initial=0.0)))
        g = t.grid
        cell_start = np.arange(g.cells) * g.width_s + shift_s
        keep = (cell_start >= core_s[0]) & (cell_start < core_s[1])
        if keep.any():
            win = (cell_start[keep] // w).astype(np.int64)
            lo = int(win.min())
            peaks = np.zeros(int(win.max()) - lo + 1)
            np.maximum.at(peaks, win - lo, t.decode_batch_cells[keep])
            self.peak_batch_w = _add_at(self.peak_batch_w, lo, peaks, "max")

    @property
    def span_s(self) -> float:
        """From the first arrival to the last completion, s."""
        return max(self.last_end_s - self.first_arrival_s, 0.0) if self.requests else 0.0

    def split(self) -> SplitSummary:
        """The split as ``stages.summarize_split`` gives it over every chunk's requests."""
        s = self.sums
        p, d = s.get("prefill_gpu", 0.0), s.get("decode_gpu", 0.0)
        lp, ld, p0 = s.get("ttft", 0.0), s.get("decode", 0.0), s.get("no_reuse", 0.0)
        classes = {
            "prefill-dominated": int(self.classes[0]),
            "decode-dominated": int(self.classes[1]),
        }
        classes["balanced"] = self.requests - sum(classes.values())
        span = self.span_s
        sk = self.sketches
        empty = QuantileSketch()
        return SplitSummary(
            prefill_gpu_s=p,
            decode_gpu_s=d,
            prefill_share=_share(p, d),
            classification=classify(_share(p, d)),
            latency_prefill_s=lp,
            latency_decode_s=ld,
            latency_prefill_share=_share(lp, ld),
            latency_classification=classify(_share(lp, ld)),
            prefill_gpu_no_reuse_s=p0,
            prefill_share_no_reuse=_share(p0, d),
            prefill_gpu_saved_by_reuse_s=p0 - p,
            request_classes=classes,
            prefill_gpu_per_request_s=sk.get("prefill_gpu", empty).distribution(),
            decode_gpu_per_request_s=sk.get("decode_gpu", empty).distribution(),
            prefill_share_per_request=sk.get("share", empty).distribution(),
            ttft_s=sk.get("ttft", empty).distribution(),
            decode_latency_s=sk.get("decode", empty).distribution(),
            mean_decode_batch=s.get("batch", 0.0) / self.decoding if self.decoding else 0.0,
            measured_requests=self.measured,
            instances=self.instances,
            gpu_busy_fraction=(p + d) / (self.instances * span) if span > 0 else None,
        )

    def windows(self) -> int:
        """Windows from 0 to the last completion (as ``profile_io`` counts them)."""
        return window_count(self.last_end_s, self.window_s)

    def io(self, drive_capacity_bytes: float | None) -> IoProfile:
        """The I/O demand as ``metrics.profile_io`` gives it over every chunk's requests."""
        windows = self.windows()
        write = self.write.stage(windows, self.window_s, self.chunk_tokens)
        notes: tuple[str, ...] = ()
        if self.hits_known:
            read = self.read.stage(windows, self.window_s, self.chunk_tokens)
        else:
            read = StageIo(False, float("nan"), None, None, None, np.zeros(0))
            notes = (
                "prefix hits unknown (no block hashes and no cached_tokens): read demand is "
                "unknown, not zero, and write demand assumes every prompt token misses",
            )
        per_day = write.bandwidth.mean_per_s * S_PER_DAY if write.bandwidth else 0.0
        return IoProfile(
            window_s=self.window_s,
            chunk_tokens=self.chunk_tokens,
            io_unit_bytes=self.io_unit_bytes,
            windows=windows,
            write=write,
            read=read,
            write_bytes_per_day=per_day,
            drive_writes_per_day=per_day / drive_capacity_bytes if drive_capacity_bytes else None,
            drive_capacity_bytes=drive_capacity_bytes,
            notes=notes,
        )

    def concurrency(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per window: (start s, mean requests in flight, peak decode batch)."""
        windows = self.windows()
        return (
            np.arange(windows, dtype=np.float64) * self.window_s,
            _grown(self.inflight_w, windows)[:windows],
            _grown(self.peak_batch_w, windows)[:windows],
        )

    def share_below(self, index: int) -> float | None:
        """Share of all hit tokens in requests whose hit is below breakeven ``index``."""
        total = self.sums.get("hits", 0.0)
        if total <= 0:
            return None
        return float(self.hits_below[index]) / total
