"""Calibration recovers known compute / memory factors and overhead from synthetic rows."""

from __future__ import annotations

import numpy as np
import pytest

from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.models import get_model
from kvadvisor.perfmodel.calibrate import CalibrationRows, calibrate
from kvadvisor.perfmodel.perf import PerfModel


def _rows(truth: PerfModel, n: int, noise: float, seed: int = 0) -> CalibrationRows:
    rng = np.random.default_rng(seed)
    new = rng.integers(64, 16_000, n).astype(float)
    cached = rng.integers(0, 8_000, n).astype(float)
    batch = rng.integers(1, 256, n).astype(float)
    kv = batch * truth.kv_rank_bytes(rng.integers(100, 8_000, n).astype(float))
    prefill = truth.prefill_s(new, cached) * np.exp(rng.normal(0, noise, n))
    step = truth.decode_step_s(batch, kv) * np.exp(rng.normal(0, noise, n))
    return CalibrationRows(new, cached, prefill, step, batch, kv)


def test_recovers_known_factors_and_reports_heldout_error() -> None:
    """Truth: compute x0.7, memory x0.8, 2 ms per step; 3 % noise, 5 % of prefills spoiled."""
    pm = PerfModel.build(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    truth = pm.with_efficiency(pm.efficiency.scaled("truth", 0.7, 0.8, 2000.0))
    rows = _rows(truth, 500, noise=0.03)
    spoiled = rows.measured_prefill_s.copy()
    spoiled[::20] *= 5.0  # stalled requests: the robust loss must shrug them off
    rows = CalibrationRows(
        rows.new_tokens,
        rows.cached_tokens,
        spoiled,
        rows.measured_step_s,
        rows.mean_batch,
        rows.mean_batch_kv_rank_bytes,
    )
    cal = calibrate(pm, rows)
    assert cal is not None and cal.converged
    assert cal.compute_scale == pytest.approx(0.7, rel=0.05)
    assert cal.memory_scale == pytest.approx(0.8, rel=0.05)
    assert cal.step_overhead_us == pytest.approx(2000.0, rel=0.15)
    assert cal.efficiency.gemm_efficiency == pytest.approx(
        0.7 * pm.efficiency.gemm_efficiency, rel=0.05
    )
    assert (cal.fit_rows, cal.heldout_rows) == (400, 100)
    assert cal.decode_heldout.median_ape < 0.05
    assert cal.prefill_heldout.median_ape < 0.05
    assert cal.decode_heldout_prior.median_ape > 0.15  # the defaults were visibly off
    assert cal.efficiency.source == "calibrated"


def test_too_few_rows() -> None:
    """Below ten measured rows there is nothing to fit."""
    pm = PerfModel.build(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    assert calibrate(pm, _rows(pm, 9, 0.0)) is None
