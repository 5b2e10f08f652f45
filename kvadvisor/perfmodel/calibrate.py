"""Fit the step-time model to measured stage latencies (robust least squares, held-out error).

Three knobs are fitted on top of the GPU's silicon-fitted coefficients: a factor on every
compute-side efficiency (GEMMs, experts, prefill attention), a factor on every memory-side one
(weight, expert and KV reads) and the fixed per-step overhead (``Efficiency.scaled``): prefill
is mostly compute, decode mostly memory, short steps mostly fixed cost, so each knob has rows
that pin it. Residuals are log ratios ``log(model / measured)`` of prefill latency and of decode
time per step, so every row weighs the same whatever its size; scipy's ``least_squares`` with
the ``soft_l1`` loss keeps outliers (a stalled request, a queueing spike) from dragging the fit.
Every fifth measured row is held out and the fit's error is reported on those rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvadvisor.perfmodel.efficiency import Efficiency
from kvadvisor.perfmodel.perf import PerfModel

HELDOUT_EVERY = 5
MIN_ROWS = 10
# Bounds of the fitted factors on the prior efficiencies and of the per-step overhead.
SCALE_BOUNDS = (0.05, 20.0)
OVERHEAD_BOUNDS_US = (0.0, 1e6)
SOFT_L1_SCALE = 0.1  # log-error at which the loss turns linear (about 10 %)


@dataclass(frozen=True)
class FitError:
    """Mean and median absolute percentage error of a model against measured rows."""

    rows: int
    mape: float | None
    median_ape: float | None

    @classmethod
    def of(cls, model: np.ndarray, measured: np.ndarray) -> FitError:
        """Errors over rows where both are positive and finite."""
        ok = np.isfinite(model) & np.isfinite(measured) & (measured > 0)
        if not ok.any():
            return cls(0, None, None)
        ape = np.abs(model[ok] - measured[ok]) / measured[ok]
        return cls(int(ok.sum()), float(ape.mean()), float(np.median(ape)))


@dataclass(frozen=True)
class StepCalibration:
    """Coefficients fitted to a trace's measured requests, and the deployment measured.

    The fit scales the measured GPU's coefficients (``Efficiency.scaled``: compute, memory,
    per-step overhead), so it carries to any deployment of the same model on the same GPU (any
    TP degree: the factors are fractions of that GPU's peaks); another GPU or model keeps its
    own coefficients. ``method``: "replay" (closed loop) or "open_loop".
    """

    efficiency: Efficiency
    gpu: str
    model: str
    method: str

    def mismatch(self, gpu: str, model: str) -> str | None:
        """None when the calibration applies to ``gpu`` and ``model``, else why it does not."""
        if gpu != self.gpu:
            return (
                f"the trace's calibration (measured on {self.gpu}) does not apply to {gpu}: "
                "its fitted coefficients are used"
            )
        if model != self.model:
            return (
                f"the trace's calibration (measured with {self.model}) does not apply to "
                f"{model}: the fitted coefficients are used"
            )
        return None

    @property
    def label(self) -> str:
        """How the report names the calibrated step model."""
        loop = "closed loop, through the replay" if self.method == "replay" else "open loop"
        return (
            f"calibrated: the roofline fitted to the trace's measured requests on {self.gpu} "
            f"({loop})"
        )


@dataclass(frozen=True)
class Calibration:
    """Fitted coefficients and the fit's error, before and after, on held-out rows.

    ``compute_scale`` and ``memory_scale`` multiply the prior's compute- and memory-side
    efficiencies; ``step_overhead_us`` replaces its per-step overhead.
    """

    efficiency: Efficiency
    prior: Efficiency
    fit_rows: int
    heldout_rows: int
    prefill_fit: FitError
    prefill_heldout: FitError
    decode_fit: FitError
    decode_heldout: FitError
    prefill_heldout_prior: FitError
    decode_heldout_prior: FitError
    converged: bool
    compute_scale: float = 1.0
    memory_scale: float = 1.0
    step_overhead_us: float = 0.0


@dataclass(frozen=True)
class CalibrationRows:
    """Measured rows and the model inputs for them (arrays of equal length).

    ``measured_step_s`` is decode time per step (NaN where a request has no decode step);
    ``mean_batch`` and ``mean_batch_kv_rank_bytes`` are the decode batch the request ran in,
    from the trace's measured timings.
    """

    new_tokens: np.ndarray
    cached_tokens: np.ndarray
    measured_prefill_s: np.ndarray
    measured_step_s: np.ndarray
    mean_batch: np.ndarray
    mean_batch_kv_rank_bytes: np.ndarray


def _predict(pm: PerfModel, rows: CalibrationRows) -> tuple[np.ndarray, np.ndarray]:
    prefill = pm.prefill_s(rows.new_tokens, rows.cached_tokens)
    step = pm.decode_step_s(rows.mean_batch, rows.mean_batch_kv_rank_bytes)
    return prefill, step


def _subset(rows: CalibrationRows, mask: np.ndarray) -> CalibrationRows:
    return CalibrationRows(*(getattr(rows, f)[mask] for f in CalibrationRows.__dataclass_fields__))


def _errors(pm: PerfModel, rows: CalibrationRows) -> tuple[FitError, FitError]:
    prefill, step = _predict(pm, rows)
    return (FitError.of(prefill, rows.measured_prefill_s), FitError.of(step, rows.measured_step_s))


def calibrate(pm: PerfModel, rows: CalibrationRows) -> Calibration | None:
    """Fit the compute and memory factors and the step overhead; None below MIN_ROWS rows."""
    # scipy.optimize costs about half a second to import; only calibration needs it.
    from scipy.optimize import least_squares

    n = len(rows.new_tokens)
    if n < MIN_ROWS:
        return None
    heldout = (np.arange(n) % HELDOUT_EVERY) == HELDOUT_EVERY - 1
    fit, test = _subset(rows, ~heldout), _subset(rows, heldout)
    prior = pm.efficiency
    p_ok = np.isfinite(fit.measured_prefill_s) & (fit.measured_prefill_s > 0)
    d_ok = np.isfinite(fit.measured_step_s) & (fit.measured_step_s > 0)
    log_p = np.log(np.where(p_ok, fit.measured_prefill_s, 1.0))
    log_d = np.log(np.where(d_ok, fit.measured_step_s, 1.0))

    def coefficients(x: np.ndarray) -> Efficiency:
        compute, memory = np.exp(x[:2])
        return prior.scaled("calibrated", float(compute), float(memory), float(x[2]))

    def residuals(x: np.ndarray) -> np.ndarray:
        prefill, step = _predict(pm.with_efficiency(coefficients(x)), fit)
        return np.concatenate([(np.log(prefill) - log_p)[p_ok], (np.log(step) - log_d)[d_ok]])

    lo_s, hi_s = np.log(SCALE_BOUNDS)
    lo = np.array([lo_s, lo_s, OVERHEAD_BOUNDS_US[0]])
    hi = np.array([hi_s, hi_s, OVERHEAD_BOUNDS_US[1]])
    x0 = np.array([0.0, 0.0, min(max(prior.step_overhead_us, lo[2]), hi[2])])
    result = least_squares(
        residuals,
        x0,
        bounds=(lo, hi),
        loss="soft_l1",
        f_scale=SOFT_L1_SCALE,
        x_scale=np.array([1.0, 1.0, max(prior.step_overhead_us, 100.0)]),
    )
    fitted = pm.with_efficiency(coefficients(result.x))
    prefill_fit, decode_fit = _errors(fitted, fit)
    prefill_test, decode_test = _errors(fitted, test)
    prefill_prior, decode_prior = _errors(pm, test)
    return Calibration(
        efficiency=fitted.efficiency,
        prior=prior,
        fit_rows=int((~heldout).sum()),
        heldout_rows=int(heldout.sum()),
        prefill_fit=prefill_fit,
        prefill_heldout=prefill_test,
        decode_fit=decode_fit,
        decode_heldout=decode_test,
        prefill_heldout_prior=prefill_prior,
        decode_heldout_prior=decode_prior,
        converged=bool(result.success),
        compute_scale=float(np.exp(result.x[0])),
        memory_scale=float(np.exp(result.x[1])),
        step_overhead_us=float(result.x[2]),
    )
