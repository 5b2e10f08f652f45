"""Calibration recovers known efficiency factors from synthetic measured rows."""

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
    batch = rng.integers(1, 4_000, n).astype(float)  # large batches make decode compute-bound
    kv = batch * truth.kv_rank_bytes(rng.integers(100, 2_000, n).astype(float))
    prefill = truth.prefill_s(new, cached) * np.exp(rng.normal(0, noise, n))
    step = truth.decode_step_s(batch, kv) * np.exp(rng.normal(0, noise, n))
    return CalibrationRows(new, cached, prefill, step, batch, kv)


def test_recovers_known_factors_and_reports_heldout_error() -> None:
    """True factors 0.6 / 0.4 / 0.65 from defaults 0.45 / 0.30 / 0.8, 3 % noise, 5 % outliers."""
    pm = PerfModel.build(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    truth = pm.with_efficiency(
        pm.efficiency.with_values("truth", prefill_mfu=0.6, decode_mfu=0.4, memory=0.65)
    )
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
    assert cal.efficiency.prefill_mfu == pytest.approx(0.6, rel=0.03)
    assert cal.efficiency.decode_mfu == pytest.approx(0.4, rel=0.05)
    assert cal.efficiency.memory == pytest.approx(0.65, rel=0.03)
    assert (cal.fit_rows, cal.heldout_rows) == (400, 100)
    assert cal.decode_heldout.median_ape < 0.05
    assert cal.prefill_heldout.median_ape < 0.05
    assert cal.decode_heldout_prior.median_ape > 0.15  # the defaults were visibly off
    assert cal.efficiency.source == "calibrated"


def test_too_few_rows() -> None:
    """Below ten measured rows there is nothing to fit."""
    pm = PerfModel.build(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    assert calibrate(pm, _rows(pm, 9, 0.0)) is None
