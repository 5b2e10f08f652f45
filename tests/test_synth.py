"""Synthetic traces: determinism, recovered shape parameters, hash chains, bounded streaming."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from kvadvisor.cli import app
from kvadvisor.errors import ConfigError
from kvadvisor.synth import SynthShape, generate, write_synth_parquet
from kvadvisor.synth.generate import diurnal_time, mix63
from kvadvisor.trace import read_trace


def _table(shape: SynthShape, chunk_rows: int = 4096) -> pa.Table:
    return pa.Table.from_batches(list(generate(shape, chunk_rows)))


def _flat(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    col = table["block_hashes"].combine_chunks()
    return col.offsets.to_numpy().astype(np.int64), col.values.to_numpy()


def test_same_seed_same_trace_whatever_the_chunk_size() -> None:
    """The seed fixes the trace; the chunk size never changes it; another seed does."""
    shape = SynthShape(
        requests=6000,
        seed=7,
        arrival="bursty",
        diurnal_amplitude=0.3,
        diurnal_period_s=100.0,
        sessions=300,
    )
    one = _table(shape, chunk_rows=6000)
    assert one.equals(_table(shape, chunk_rows=997))
    other = _table(SynthShape(requests=6000, seed=8, arrival="bursty", sessions=300))
    assert not np.array_equal(one["input_tokens"].to_numpy(), other["input_tokens"].to_numpy())


def test_poisson_arrivals_recover_rate_and_cv() -> None:
    """Poisson gaps: the rate and a CV of 1 come back; the first arrival is 0."""
    t = _table(SynthShape(requests=40_000, rate_per_s=25.0, seed=1))["arrival_s"].to_numpy()
    assert t[0] == 0.0
    gaps = np.diff(t)
    assert np.all(gaps >= 0)
    assert 1.0 / gaps.mean() == pytest.approx(25.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)


def test_bursty_arrivals_recover_cv() -> None:
    """Gamma gaps: the rate and the chosen coefficient of variation come back."""
    shape = SynthShape(requests=40_000, rate_per_s=5.0, arrival="bursty", burst_cv=2.0, seed=2)
    gaps = np.diff(_table(shape)["arrival_s"].to_numpy())
    assert 1.0 / gaps.mean() == pytest.approx(5.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.1)


def test_diurnal_cycle_recovers_amplitude() -> None:
    """The diurnal amplitude comes back from 2·mean(sin ωt) over whole periods."""
    # For intensity r(1 + A sin ωt) over whole periods, E[sin ωt] over arrivals is A/2.
    period = 200.0
    t = _table(
        SynthShape(
            requests=40_000, rate_per_s=20.0, diurnal_amplitude=0.6, diurnal_period_s=period, seed=3
        )
    )["arrival_s"].to_numpy()
    t = t[t < period * np.floor(t[-1] / period)]
    assert 2.0 * np.mean(np.sin(2 * np.pi * t / period)) == pytest.approx(0.6, abs=0.04)


def test_diurnal_time_change_solves_the_integrated_rate() -> None:
    """Newton's time change solves t + (A/ω)(1 − cos ωt) = τ and stays increasing."""
    tau = np.linspace(0.0, 500.0, 1001)
    a, period = 0.9, 37.0
    t = diurnal_time(tau, a, period)
    omega = 2 * np.pi / period
    np.testing.assert_allclose(t + a / omega * (1 - np.cos(omega * t)), tau, atol=1e-8)
    assert np.all(np.diff(t) > 0)


def test_lognormal_lengths_recover_median_and_sigma() -> None:
    """Prompt and output lengths: median and log standard deviation come back."""
    table = _table(
        SynthShape(
            requests=40_000,
            input_tokens_median=3000.0,
            input_tokens_sigma=0.8,
            output_tokens_median=300.0,
            output_tokens_sigma=0.5,
            seed=4,
        )
    )
    for col, median, sigma in (("input_tokens", 3000.0, 0.8), ("output_tokens", 300.0, 0.5)):
        logs = np.log(table[col].to_numpy())
        assert np.exp(np.median(logs)) == pytest.approx(median, rel=0.03)
        assert logs.std() == pytest.approx(sigma, rel=0.03)


def _zipf_slope(counts: np.ndarray, top: int) -> float:
    counts = np.sort(counts)[::-1][:top]
    ranks = np.arange(1, len(counts) + 1)
    return float(np.polyfit(np.log(ranks), np.log(counts), 1)[0])


def test_session_popularity_is_zipf() -> None:
    """Requests per session follow the chosen Zipf exponent (log-log slope)."""
    # Sessions never end here, so a session is a slot and its request count follows Zipf(s).
    shape = SynthShape(
        requests=40_000, sessions=1000, session_zipf=1.1, mean_requests_per_session=1e12, seed=5
    )
    _, counts = np.unique(
        _table(shape)["session_id"].to_numpy(zero_copy_only=False), return_counts=True
    )
    assert _zipf_slope(counts, 30) == pytest.approx(-1.1, abs=0.12)


def test_system_prompt_popularity_is_zipf_and_sessions_churn() -> None:
    """System prompts per session follow Zipf; sessions end at rate 1/m per request."""
    shape = SynthShape(
        requests=40_000,
        sessions=2000,
        mean_requests_per_session=2.0,
        system_prompts=200,
        system_prompt_zipf=1.2,
        system_prompt_tokens_median=8192.0,
        system_prompt_tokens_sigma=0.2,
        seed=6,
    )
    table = _table(shape)
    sessions = table["session_id"].to_numpy(zero_copy_only=False)
    first_block = (
        table["block_hashes"]
        .combine_chunks()
        .values.to_numpy()[table["block_hashes"].combine_chunks().offsets.to_numpy()[:-1]]
    )
    _, first_of_session = np.unique(sessions, return_index=True)
    _, counts = np.unique(first_block[first_of_session], return_counts=True)
    assert _zipf_slope(counts, 15) == pytest.approx(-1.2, abs=0.15)
    # Every request ends its session with probability 1/2: about half as many new sessions.
    new_sessions = len(first_of_session) - len(np.unique(sessions[sessions.astype(int) < 2000]))
    assert new_sessions == pytest.approx(20_000, rel=0.05)


def test_hash_chains_are_consistent_and_sized_by_block_tokens() -> None:
    """ceil(input/block) hashes per request; every id has one position and one predecessor."""
    shape = SynthShape(
        requests=20_000,
        block_tokens=64,
        input_tokens_median=600.0,
        sessions=500,
        system_prompts=20,
        system_prompt_tokens_median=300.0,
        seed=9,
    )
    table = _table(shape)
    offsets, values = _flat(table)
    blocks = np.diff(offsets)
    np.testing.assert_array_equal(blocks, -(-table["input_tokens"].to_numpy() // 64))
    position = np.arange(len(values)) - np.repeat(offsets[:-1], blocks)
    pred = np.concatenate(([-1], values[:-1]))
    pred[offsets[:-1]] = -1  # the first block of a request has no predecessor
    assert len(np.unique(values)) < len(values)  # there is reuse to measure
    keys = np.unique(np.stack([values, position, pred]), axis=1)
    # Every id sits at one position after one predecessor: one (position, pred) per id.
    assert len(np.unique(keys[0])) == keys.shape[1]
    assert values.min() >= 0


def test_mix63_is_injective() -> None:
    """The 63-bit mixing never maps two raw ids to one hash."""
    raw = np.concatenate([np.arange(100_000), (np.arange(100_000) << 20) + 3])
    assert len(np.unique(mix63(raw))) == len(np.unique(raw))


def test_generation_is_lazy_and_batches_are_bounded() -> None:
    """Generation is lazy: a billion-request shape yields its first bounded batch at once."""
    # A billion requests could never sit in memory: the first batch comes at once.
    first = next(generate(SynthShape(requests=10**9), chunk_rows=1000))
    assert first.num_rows == 1000


def test_parquet_is_streamed_in_bounded_row_groups(tmp_path) -> None:
    """One row group per chunk; the file reads back as the generated canonical trace."""
    shape = SynthShape(requests=5500, block_tokens=16, input_tokens_median=200.0, seed=11)
    path = tmp_path / "s.parquet"
    result = write_synth_parquet(shape, path, chunk_rows=1000)
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1000] * 5 + [500]
    assert result.batches == 6
    trace = read_trace(path)
    assert trace.block_tokens == 16 and trace.source_format == "synth"
    # Already canonical (sorted, starting at 0): the only note says where it came from.
    assert trace.notes == (
        "synthetic trace (kvadvisor synth, seed 11; shape in kvadvisor.synth_shape)",
    )
    assert trace.table.select(list(_table(shape).column_names)).equals(
        _table(shape, chunk_rows=1000)
    )
    assert result.block_hashes == len(trace.hash_arrays()[1])


def test_bad_shape_is_a_config_error() -> None:
    """Impossible shapes are ConfigErrors naming the option."""
    with pytest.raises(ConfigError, match="--diurnal-amplitude"):
        SynthShape(diurnal_amplitude=1.0)
    with pytest.raises(ConfigError, match="--arrival"):
        SynthShape(arrival="weekly")


def test_cli_synth_writes_and_rejects_bad_options(tmp_path) -> None:
    """The synth command writes a readable trace; a bad option is exit 2, one line."""
    out = tmp_path / "t.parquet"
    runner = CliRunner()
    ok = runner.invoke(app, ["synth", "-o", str(out), "--requests", "500", "--seed", "3"])
    assert ok.exit_code == 0, ok.output
    assert read_trace(out).requests == 500
    bad = runner.invoke(app, ["synth", "-o", str(out), "--rate", "0"])
    assert bad.exit_code == 2
    assert "--rate must be in (0, 1,000,000,000]" in bad.output and "Traceback" not in bad.output
