"""KV I/O demand per stage: bandwidth over windows, I/Os per chunk, write amplification, DWPD.

Vectorised throughout.

* Write demand: KV bytes of the prompt tokens that missed the prefix cache, written when the
  request's prefill completes: ``kv(n) - kv(h)`` (``kv`` is the window-capped KV size).
* Read demand: KV bytes of the hit tokens, ``kv(h)``, loaded when prefill starts.
* I/Os: the token ranges ``[h, n)`` (write) and ``[0, h)`` (read) cut at multiples of
  ``chunk_tokens`` (LMCache's chunk_size, default 256); each piece is one I/O.
* Write amplification: each I/O rounded up to whole device units, bytes written to the device
  over KV bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvadvisor.errors import ConfigError
from kvadvisor.metrics.timeline import window_count
from kvadvisor.units import S_PER_DAY

DEFAULT_CHUNK_TOKENS = 256  # LMCache chunk_size default (research/field.md section 0.3)
DEFAULT_WINDOW_S = 1.0
DEFAULT_IO_UNIT_BYTES = 4096  # NVMe 4 KiB logical block / flash page granularity


@dataclass(frozen=True)
class RateStats:
    """A per-window rate series reduced: mean, p50, p99, peak and peak/mean (units per s)."""

    mean_per_s: float
    p50_per_s: float
    p99_per_s: float
    peak_per_s: float
    peak_to_mean: float | None

    @classmethod
    def of(cls, rates: np.ndarray) -> RateStats:
        """Summarise a per-window rate series (every window counts, idle ones included)."""
        r = np.asarray(rates, dtype=np.float64)
        if len(r) == 0:
            return cls(0.0, 0.0, 0.0, 0.0, None)
        mean = float(r.mean())
        p50, p99 = np.percentile(r, [50, 99])
        peak = float(r.max())
        return cls(mean, float(p50), float(p99), peak, peak / mean if mean > 0 else None)


@dataclass(frozen=True)
class ChunkIo:
    """I/O counts and sizes when a token range per request is cut into chunks."""

    ios: int
    full_chunk_ios: int
    partial_chunk_ios: int
    bytes: float
    mean_io_bytes: float
    full_chunk_bytes: float  # size of a full chunk at the model's bytes per token
    device_bytes: float  # after rounding each I/O up to the device unit
    write_amplification: float | None


@dataclass(frozen=True)
class StageIo:
    """One direction (write or read): totals, rates and I/O pattern."""

    known: bool
    bytes_total: float
    bandwidth: RateStats | None  # bytes per second
    iops: RateStats | None  # I/Os per second at the chunk size
    chunks: ChunkIo | None
    rate_series: np.ndarray  # bytes per second per window (empty when unknown)


@dataclass(frozen=True)
class IoProfile:
    """KV I/O demand of a trace."""

    window_s: float
    chunk_tokens: int
    io_unit_bytes: int
    windows: int
    write: StageIo
    read: StageIo
    write_bytes_per_day: float
    drive_writes_per_day: float | None
    drive_capacity_bytes: float | None
    notes: tuple[str, ...]


def _pieces(lo: np.ndarray, hi: np.ndarray, chunk: int) -> tuple[np.ndarray, ...]:
    """Cut ``[lo, hi)`` at multiples of ``chunk``: (head tokens, full chunks, tail tokens)."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.maximum(np.asarray(hi, dtype=np.int64), lo)
    aligned = np.minimum(-(-lo // chunk) * chunk, hi)  # first boundary at or after lo
    head = aligned - lo
    full = (hi - aligned) // chunk
    tail = (hi - aligned) % chunk
    return head, full, tail


def chunk_io(
    lo_tokens: np.ndarray,
    hi_tokens: np.ndarray,
    bytes_total: np.ndarray,
    chunk_tokens: int,
    io_unit_bytes: int,
) -> tuple[ChunkIo, np.ndarray]:
    """I/O pattern of the ranges ``[lo, hi)`` per request carrying ``bytes_total`` each.

    A piece of ``k`` tokens carries ``k x bytes_total / (hi - lo)`` bytes (so window caps spread
    evenly) and is rounded up to whole ``io_unit_bytes`` on the device. Returns the summary and
    the I/O count per request.
    """
    head, full, tail = _pieces(lo_tokens, hi_tokens, chunk_tokens)
    tokens = (head + full * chunk_tokens + tail).astype(np.float64)
    per_token = np.divide(bytes_total, tokens, out=np.zeros_like(tokens), where=tokens > 0)
    ios = (head > 0).astype(np.int64) + full + (tail > 0).astype(np.int64)
    u = float(io_unit_bytes)

    def rounded(t: np.ndarray) -> np.ndarray:
        return np.ceil(t * per_token / u) * u

    device = rounded(head) + full * rounded(np.full_like(head, chunk_tokens)) + rounded(tail)
    total = float(np.sum(bytes_total))
    n_ios = int(ios.sum())
    moved = tokens > 0
    full_chunk_bytes = float(np.median(per_token[moved]) * chunk_tokens) if moved.any() else 0.0
    return (
        ChunkIo(
            ios=n_ios,
            full_chunk_ios=int(full.sum()),
            partial_chunk_ios=int(np.count_nonzero(head) + np.count_nonzero(tail)),
            bytes=total,
            mean_io_bytes=total / n_ios if n_ios else 0.0,
            full_chunk_bytes=full_chunk_bytes,
            device_bytes=float(device.sum()),
            write_amplification=float(device.sum()) / total if total > 0 else None,
        ),
        ios,
    )


def io_demand(
    *,
    input_tokens: np.ndarray,
    hit_tokens: np.ndarray | None,
    read_time_s: np.ndarray,
    write_time_s: np.ndarray,
    kv_bytes: Callable[[np.ndarray], np.ndarray],
    window_s: float = DEFAULT_WINDOW_S,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    io_unit_bytes: int = DEFAULT_IO_UNIT_BYTES,
    drive_capacity_bytes: float | None = None,
    span_s: float | None = None,
) -> IoProfile:
    """Write and read KV demand over windows of ``window_s`` seconds.

    ``hit_tokens`` None means the hits are unknown (no hashes, no ``cached_tokens``): read demand
    is then unknown, not zero, and write demand assumes every prompt token misses.
    ``span_s`` is the time the windows cover (default: up to the last I/O).
    """
    if window_s <= 0:
        raise ConfigError(f"--window must be positive, got {window_s}")
    if chunk_tokens < 1:
        raise ConfigError(f"--chunk-tokens must be at least 1, got {chunk_tokens}")
    if io_unit_bytes < 1:
        raise ConfigError(
            f"the device I/O unit (--io-unit) must be at least 1 byte, got {io_unit_bytes}; "
            "give the device's page or block size, e.g. --io-unit '4 KiB' (most NVMe drives)"
        )
    n = np.asarray(input_tokens, dtype=np.int64)
    known = hit_tokens is not None
    h = np.clip(np.asarray(hit_tokens, dtype=np.int64), 0, n) if known else np.zeros_like(n)
    kv_n = kv_bytes(n)
    kv_h = kv_bytes(h)
    write_bytes = np.maximum(kv_n - kv_h, 0.0)
    read_bytes = kv_h

    wt = np.asarray(write_time_s, dtype=np.float64)
    rt = np.asarray(read_time_s, dtype=np.float64)
    last = float(max(wt.max(initial=0.0), rt.max(initial=0.0)))
    windows = window_count(span_s if span_s is not None else last, window_s)
    wbin = np.minimum((wt // window_s).astype(np.int64), windows - 1)
    rbin = np.minimum((rt // window_s).astype(np.int64), windows - 1)

    def per_window(bins: np.ndarray, weights: np.ndarray) -> np.ndarray:
        return np.bincount(bins, weights=weights, minlength=windows)[:windows] / window_s

    def measured(bins: np.ndarray, lo: np.ndarray, hi: np.ndarray, nbytes: np.ndarray) -> StageIo:
        """One stage's demand for token ranges [lo, hi): bytes and I/Os per window, totals."""
        chunks, ios = chunk_io(lo, hi, nbytes, chunk_tokens, io_unit_bytes)
        rate = per_window(bins, nbytes)
        return StageIo(
            known=True,
            bytes_total=float(nbytes.sum()),
            bandwidth=RateStats.of(rate),
            iops=RateStats.of(per_window(bins, ios.astype(np.float64))),
            chunks=chunks,
            rate_series=rate,
        )

    # Writes are the prompt tokens after the hit, [h, n); reads are the hit itself, [0, h).
    write = measured(wbin, h, n, write_bytes)
    notes: list[str] = []
    if known:
        read = measured(rbin, np.zeros_like(h), h, read_bytes)
    else:
        read = StageIo(False, float("nan"), None, None, None, np.zeros(0))
        notes.append(
            "prefix hits unknown (no block hashes and no cached_tokens): read demand is "
            "unknown, not zero, and write demand assumes every prompt token misses"
        )
    per_day = write.bandwidth.mean_per_s * S_PER_DAY if write.bandwidth else 0.0
    dwpd = per_day / drive_capacity_bytes if drive_capacity_bytes else None
    return IoProfile(
        window_s=window_s,
        chunk_tokens=chunk_tokens,
        io_unit_bytes=io_unit_bytes,
        windows=windows,
        write=write,
        read=read,
        write_bytes_per_day=per_day,
        drive_writes_per_day=dwpd,
        drive_capacity_bytes=drive_capacity_bytes,
        notes=tuple(notes),
    )
