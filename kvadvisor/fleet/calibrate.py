"""Calibration through the replay: fit the step model so replayed latencies match measured ones.

A TTFT measured under load includes queueing and the other requests sharing the batch; an
open-loop fit (``perfmodel.calibrate``) reads all of it as prefill time. Here the measured
requests are replayed closed loop through one replica of the deployment (their own arrival
times, vLLM's scheduler: continuous batching, chunked prefill, the GPU KV pool), and the three
knobs of ``Efficiency.scaled`` (compute factor, memory factor, per-step overhead) are fitted by
robust least squares to ``log(replayed / measured)`` of each request's TTFT and time per output
token, starting from the best point of a coarse grid (near saturation the replayed TTFT is a
steep function of the factors). Every fifth measured request is held out: its measurements
never enter the fit (the replay still runs it, as the engine did), and the fit's error is
reported on those rows, with the prior coefficients' error beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvadvisor.catalog.efficiency import Efficiency
from kvadvisor.fleet.build import kv_model, pool_tokens
from kvadvisor.fleet.engine import run_resolved
from kvadvisor.fleet.fromplan import VLLM_BLOCK_TOKENS, _batch_defaults
from kvadvisor.fleet.hits import TraceArrays
from kvadvisor.fleet.resolved import ResolvedFleet, ResolvedScheduler, ResolvedStage
from kvadvisor.fleet.summary import request_columns
from kvadvisor.perfmodel.calibrate import (
    HELDOUT_EVERY,
    MIN_ROWS,
    OVERHEAD_BOUNDS_US,
    SCALE_BOUNDS,
    SOFT_L1_SCALE,
    FitError,
)
from kvadvisor.perfmodel.perf import PerfModel
from kvadvisor.vocab import Stage, Topology

# The replay of a measured file is cut to its first requests beyond this (a contiguous window
# keeps its queueing); benchmark files are far smaller.
MAX_REPLAYED_REQUESTS = 5_000
# Starting grid of compute and memory factors. Near saturation the replayed TTFT is a steep,
# step-like function of the factors (queueing grows without bound past the throughput), so a
# local fit from the prior alone can stop in a wrong valley; the best grid point starts it.
START_FACTORS = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0)
START_OVERHEADS_US = (0.0, 1_000.0, 3_000.0, 10_000.0)  # engines spend about 0.5-10 ms a step
# Finite-difference step (in log factor) of the local fit: the replay is piecewise constant in
# the factors at small scales (discrete steps), so derivatives need a visible step.
DIFF_STEP = 0.01


@dataclass(frozen=True)
class ReplayCalibration:
    """The coefficients fitted through the replay and their held-out errors (TTFT, TPOT)."""

    efficiency: Efficiency
    prior: Efficiency
    fit_rows: int
    heldout_rows: int
    ttft_fit: FitError
    ttft_heldout: FitError
    ttft_heldout_prior: FitError
    tpot_fit: FitError
    tpot_heldout: FitError
    tpot_heldout_prior: FitError
    compute_scale: float
    memory_scale: float
    step_overhead_us: float
    converged: bool
    replayed_requests: int


def replayed_latencies(arrays: TraceArrays, pm: PerfModel) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, time per output token) of every request replayed on one replica of ``pm``, s.

    One replica of ``pm.tp`` GPUs with vLLM's default scheduler for the GPU and its GPU KV
    pool, no KV tiers; the step table is ``pm``'s.
    """
    batched, seqs = _batch_defaults(pm.gpu)
    stage = ResolvedStage(
        role=Stage.SERVING,
        instances=1,
        replicas_per_instance=1,
        gpus_per_replica=pm.tp,
        step=pm.step_table,
        pool_tokens=pool_tokens(pm),
        scheduler=ResolvedScheduler(batched, seqs, VLLM_BLOCK_TOKENS),
        gpu=pm.gpu.name,
    )
    kv = kv_model(pm.model, pm.kv_dtype, pm.tp)
    deployment = ResolvedFleet("calibration", Topology.AGGREGATED, (stage,), kv)
    cols = request_columns(run_resolved(arrays, deployment))
    return cols["ttft_s"], cols["tpot_s"]


def _window(arrays: TraceArrays, n: int) -> TraceArrays:
    if arrays.requests <= n:
        return arrays
    return arrays.take(np.arange(n))


def calibrate_through_replay(
    arrays: TraceArrays,
    measured_ttft_s: np.ndarray,
    measured_tpot_s: np.ndarray,
    pm: PerfModel,
) -> ReplayCalibration | None:
    """Fit compute, memory and overhead through the replay; None below MIN_ROWS measured rows.

    ``measured_*`` hold one value per request of ``arrays`` (NaN where not measured). Raises
    ``ConfigError`` when the model does not fit on the replica (no KV pool to replay with).
    """
    from scipy.optimize import least_squares

    n = min(arrays.requests, MAX_REPLAYED_REQUESTS)
    arrays = _window(arrays, n)
    m_ttft = np.asarray(measured_ttft_s, dtype=np.float64)[:n]
    m_tpot = np.asarray(measured_tpot_s, dtype=np.float64)[:n]
    has = np.isfinite(m_ttft) & (m_ttft > 0)
    if int(has.sum()) < MIN_ROWS:
        return None
    order = np.cumsum(has) - 1  # measured rows numbered in trace order
    heldout = has & ((order % HELDOUT_EVERY) == HELDOUT_EVERY - 1)
    fit_t = has & ~heldout
    fit_d = fit_t & np.isfinite(m_tpot) & (m_tpot > 0)
    prior = pm.efficiency

    def model_at(x: np.ndarray) -> PerfModel:
        compute, memory = np.exp(x[:2])
        scaled = prior.scaled("calibrated", float(compute), float(memory), float(x[2]))
        return pm.with_efficiency(scaled)

    def residuals(x: np.ndarray) -> np.ndarray:
        ttft, tpot = replayed_latencies(arrays, model_at(x))
        r_t = np.log(np.maximum(ttft[fit_t], 1e-9) / m_ttft[fit_t])
        r_d = np.log(np.maximum(tpot[fit_d], 1e-9) / m_tpot[fit_d])
        return np.concatenate([np.nan_to_num(r_t, nan=5.0), np.nan_to_num(r_d, nan=5.0)])

    def cost(x: np.ndarray) -> float:
        r = residuals(x) / SOFT_L1_SCALE
        return float(np.sum(np.sqrt(1.0 + r * r) - 1.0))

    lo_s, hi_s = np.log(SCALE_BOUNDS)
    lo = np.array([lo_s, lo_s, OVERHEAD_BOUNDS_US[0]])
    hi = np.array([hi_s, hi_s, OVERHEAD_BOUNDS_US[1]])
    # The prior is a start too: the fit never ends worse than the defaults on its own rows.
    starts = [np.array([0.0, 0.0, min(max(prior.step_overhead_us, lo[2]), hi[2])])]
    starts += [
        np.array([np.log(c), np.log(m), o])
        for c in START_FACTORS
        for m in START_FACTORS
        for o in START_OVERHEADS_US
    ]
    x0 = min(starts, key=cost)
    result = least_squares(
        residuals,
        x0,
        bounds=(lo, hi),
        loss="soft_l1",
        f_scale=SOFT_L1_SCALE,
        x_scale=np.array([1.0, 1.0, max(prior.step_overhead_us, 100.0)]),
        diff_step=DIFF_STEP,
    )
    fitted = model_at(result.x)
    ttft, tpot = replayed_latencies(arrays, fitted)
    ttft0, tpot0 = replayed_latencies(arrays, pm)
    test_d = heldout & np.isfinite(m_tpot)
    return ReplayCalibration(
        efficiency=fitted.efficiency,
        prior=prior,
        fit_rows=int(fit_t.sum()),
        heldout_rows=int(heldout.sum()),
        ttft_fit=FitError.of(ttft[fit_t], m_ttft[fit_t]),
        ttft_heldout=FitError.of(ttft[heldout], m_ttft[heldout]),
        ttft_heldout_prior=FitError.of(ttft0[heldout], m_ttft[heldout]),
        tpot_fit=FitError.of(tpot[fit_d], m_tpot[fit_d]),
        tpot_heldout=FitError.of(tpot[test_d], m_tpot[test_d]),
        tpot_heldout_prior=FitError.of(tpot0[test_d], m_tpot[test_d]),
        compute_scale=float(np.exp(result.x[0])),
        memory_scale=float(np.exp(result.x[1])),
        step_overhead_us=float(result.x[2]),
        converged=bool(result.success),
        replayed_requests=n,
    )
