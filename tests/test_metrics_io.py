"""KV I/O demand: hand-computed windows, chunk I/Os, write amplification, unknown hits."""

from __future__ import annotations

import numpy as np
import pytest

from kvadvisor.errors import ConfigError
from kvadvisor.metrics.io import RateStats, chunk_io, io_demand


def kv(tokens):
    """1,000 bytes per token (a round KV size)."""
    return np.asarray(tokens, dtype=float) * 1000.0


def test_windows_by_hand() -> None:
    """Writes of 300 and 200 tokens land in windows 0 and 2; reads of 100 tokens in 0 and 1."""
    prof = io_demand(
        input_tokens=np.asarray([400, 300]),
        hit_tokens=np.asarray([100, 100]),
        read_time_s=np.asarray([0.2, 1.5]),
        write_time_s=np.asarray([0.9, 2.1]),
        kv_bytes=kv,
        window_s=1.0,
        chunk_tokens=256,
        io_unit_bytes=4096,
    )
    assert prof.windows == 3
    assert prof.write.rate_series == pytest.approx([300_000.0, 0.0, 200_000.0])
    assert prof.read.rate_series == pytest.approx([100_000.0, 100_000.0, 0.0])
    w = prof.write.bandwidth
    assert w.mean_per_s == pytest.approx(500_000 / 3)
    assert w.peak_per_s == 300_000.0
    assert w.p50_per_s == 200_000.0
    assert w.peak_to_mean == pytest.approx(1.8)
    assert prof.write_bytes_per_day == pytest.approx(500_000 / 3 * 86400)


def test_chunk_pieces_and_write_amplification() -> None:
    """Miss range [100, 700) at 256-token chunks: head 156, one full 256, tail 188 tokens.

    At 1,000 B/token and 4 KiB units: 156,000 -> 159,744; 256,000 -> 258,048;
    188,000 -> 188,416 device bytes.
    """
    c, ios = chunk_io(np.asarray([100]), np.asarray([700]), np.asarray([600_000.0]), 256, 4096)
    assert (c.ios, c.full_chunk_ios, c.partial_chunk_ios) == (3, 1, 2)
    assert ios.tolist() == [3]
    assert c.device_bytes == 159_744 + 258_048 + 188_416
    assert c.write_amplification == pytest.approx((159_744 + 258_048 + 188_416) / 600_000)
    assert c.mean_io_bytes == pytest.approx(200_000)
    assert c.full_chunk_bytes == pytest.approx(256_000)


def test_aligned_io_has_no_amplification() -> None:
    """Whole chunks of a size that is a multiple of the unit write exactly what they carry."""
    c, _ = chunk_io(np.asarray([0]), np.asarray([512]), np.asarray([512 * 4096.0]), 256, 4096)
    assert c.write_amplification == 1.0 and c.partial_chunk_ios == 0


def test_unknown_hits_mean_unknown_reads() -> None:
    """Without hashes or cached_tokens the read side is unknown and every token is written."""
    prof = io_demand(
        input_tokens=np.asarray([400]),
        hit_tokens=None,
        read_time_s=np.asarray([0.0]),
        write_time_s=np.asarray([0.5]),
        kv_bytes=kv,
    )
    assert not prof.read.known and prof.read.bandwidth is None
    assert prof.write.bytes_total == 400_000
    assert any("unknown, not zero" in n for n in prof.notes)


def test_drive_writes_per_day() -> None:
    """1 MB/s for a day onto a 86.4 GB drive is one drive write per day."""
    prof = io_demand(
        input_tokens=np.asarray([1000]),
        hit_tokens=np.asarray([0]),
        read_time_s=np.asarray([0.0]),
        write_time_s=np.asarray([0.0]),
        kv_bytes=kv,
        window_s=1.0,
        drive_capacity_bytes=86.4e9,
    )
    assert prof.write.bandwidth.mean_per_s == pytest.approx(1e6)
    assert prof.drive_writes_per_day == pytest.approx(1.0)


def test_rate_stats_and_bad_options() -> None:
    """Empty series and bad options."""
    assert RateStats.of(np.zeros(0)).peak_to_mean is None
    with pytest.raises(ConfigError, match="--window"):
        io_demand(
            input_tokens=np.asarray([1]),
            hit_tokens=None,
            read_time_s=np.asarray([0.0]),
            write_time_s=np.asarray([0.0]),
            kv_bytes=kv,
            window_s=0,
        )
    with pytest.raises(ConfigError, match="--chunk-tokens"):
        io_demand(
            input_tokens=np.asarray([1]),
            hit_tokens=None,
            read_time_s=np.asarray([0.0]),
            write_time_s=np.asarray([0.0]),
            kv_bytes=kv,
            chunk_tokens=0,
        )
