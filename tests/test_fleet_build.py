"""The step-model choice of a replica: catalogs and a trace's calibration as its inputs."""

from __future__ import annotations

import numpy as np

from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.models import get_model
from kvadvisor.fleet.build import StepModelInputs, step_model_for
from kvadvisor.fleet.fromplan import resolve_plan
from kvadvisor.perfmodel.calibrate import StepCalibration
from kvadvisor.perfmodel.perf import PerfModel
from kvadvisor.plan.loader import check_plan

MODEL = get_model("llama-3.1-8b")
H100 = get_gpu("h100-sxm")
H200 = get_gpu("h200")


def _calibration(gpu: str = "h100-sxm", model: str = "llama-3.1-8b") -> StepCalibration:
    """Compute x0.5, memory x0.8 and 2 ms per step on H100 SXM's coefficients."""
    prior = PerfModel.build(MODEL, H100).efficiency
    return StepCalibration(prior.scaled("calibrated", 0.5, 0.8, 2000.0), gpu, model, "replay")


def test_calibration_is_used_on_the_gpu_and_model_it_was_measured_on() -> None:
    """Same GPU and model, any TP: the calibrated coefficients' table, named so.

    The table equals the roofline built on the calibrated coefficients (here at TP 2, the
    calibration measured at TP 1): the fit scales the GPU's coefficients, so it carries.
    """
    cal = _calibration()
    pm, table = step_model_for(MODEL, H100, 2, inputs=StepModelInputs(calibration=cal))
    assert pm.efficiency == cal.efficiency
    by_hand = PerfModel.build(MODEL, H100, tp=2, efficiency=cal.efficiency).step_table
    assert np.array_equal(table.tokens_s, by_hand.tokens_s)
    assert table.decode_s_per_kv_byte == by_hand.decode_s_per_kv_byte
    assert table.source == (
        "calibrated: the roofline fitted to the trace's measured requests on h100-sxm "
        "(closed loop, through the replay)"
    )
    # Slower than the fitted defaults: half the compute, 0.8 of the memory, 2 ms per step.
    _, default = step_model_for(MODEL, H100, 2)
    assert table.tokens_s[0] > default.tokens_s[0] and table.tokens_s[-1] > default.tokens_s[-1]


def test_calibration_does_not_apply_to_another_gpu_or_model() -> None:
    """Another GPU (or model) keeps its own coefficients, and the source says why."""
    cal = _calibration()
    pm, table = step_model_for(MODEL, H200, 1, inputs=StepModelInputs(calibration=cal))
    _, plain = step_model_for(MODEL, H200, 1)
    assert np.array_equal(table.tokens_s, plain.tokens_s)
    assert pm.efficiency == PerfModel.build(MODEL, H200).efficiency
    assert table.source == (
        f"{plain.source}; the trace's calibration (measured on h100-sxm) does not apply to "
        "h200: its fitted coefficients are used"
    )
    other = _calibration(model="qwen3-8b")
    _, table = step_model_for(MODEL, H100, 1, inputs=StepModelInputs(calibration=other))
    assert "measured with qwen3-8b) does not apply to llama-3.1-8b" in table.source


PLAN = {
    "name": "two-gpus",
    "model": {"name": "llama-3.1-8b", "tp": 1},
    "stages": {
        "prefill": {"gpu": "h100-sxm", "count": 1},
        "decode": {"gpu": "h200", "count": 1},
    },
    "pd_link": {"bandwidth": "50 GB/s"},
}


def test_a_plan_replays_the_calibrated_steps_on_the_calibrated_gpu_only() -> None:
    """Prefill on H100 SXM (where the trace was measured) calibrated; decode on H200 not."""
    plan = check_plan("plan.yaml", PLAN)
    dep, _ = resolve_plan(plan, _calibration())
    prefill, decode = dep.stages
    assert prefill.step.source.startswith("calibrated: ")
    assert "does not apply to h200" in decode.step.source
    plain, _ = resolve_plan(plan)
    assert plain.stages[0].step.source.startswith("roofline")
    assert prefill.step.tokens_s[0] > plain.stages[0].step.tokens_s[0]
