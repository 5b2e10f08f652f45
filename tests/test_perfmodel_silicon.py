"""Silicon step tables: the grid sampling (with a fake estimator) and the optional extra itself."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from perf_fixtures import HALF, TOY, TOY_GPU

from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.models import get_model
from kvadvisor.perfmodel.perf import PerfModel
from kvadvisor.perfmodel.silicon import sample_step_table, silicon_step_table

HAVE_AIC = importlib.util.find_spec("aiconfigurator_core") is not None


class TableEstimator:
    """A fake estimator whose 'silicon' times are another model's step table (ms)."""

    def __init__(self, pm: PerfModel) -> None:
        self.t = pm.step_table
        self.pm = pm
        self.calls = 0

    def prefill_ms(self, batch: int, isl: int, prefix: int) -> float:
        """One pass prefilling ``batch`` prompts of ``isl`` tokens, ``prefix`` cached."""
        self.calls += 1
        new = float(isl - prefix)
        pairs = batch * float(self.t.attention_pairs(new, float(prefix)))
        return float(self.t.step_s(batch * new, pairs, 0.0, batch)) * 1e3

    def decode_ms(self, batch: int, isl: int) -> float:
        """One decode step of ``batch`` sequences at ``isl`` tokens."""
        self.calls += 1
        kv = batch * float(self.pm.kv_rank_bytes(isl + 1.0))
        return float(self.t.step_s(batch, 0.0, kv, batch)) * 1e3

    def head_ms(self, batch: int) -> float:
        """The LM head for ``batch`` sequences."""
        return float(self.t.logits_time_s(float(batch))) * 1e3


def test_sampling_recovers_the_estimator_it_sampled() -> None:
    """Prefills and decode steps off the sampled points come back within 2 %."""
    truth = PerfModel.build(TOY, TOY_GPU, tp=2, efficiency=HALF)
    other = PerfModel.build(
        TOY, TOY_GPU, tp=2, efficiency=HALF.with_values("x", gemm_efficiency=1.0)
    )
    table = sample_step_table(other, TableEstimator(truth), "silicon: fake")
    assert table.source == "silicon: fake"
    assert table.s_per_pair == pytest.approx(truth.step_table.s_per_pair, rel=1e-6)
    assert table.decode_s_per_kv_byte == pytest.approx(
        truth.step_table.decode_s_per_kv_byte, rel=1e-6
    )
    sampled = other.with_step_table(table)
    for new in (300.0, 3000.0, 20000.0):
        got = sampled.prefill_s(np.asarray(new), np.asarray(0.0))
        assert got == pytest.approx(float(truth.prefill_s(new, 0.0)), rel=0.02)
    for b, ctx in ((3.0, 700.0), (50.0, 5000.0)):
        kv = b * truth.kv_rank_bytes(ctx)
        assert sampled.decode_step_s(b, kv) == pytest.approx(
            float(truth.decode_step_s(b, kv)), rel=0.02
        )


def test_sampling_calls_the_estimator_a_bounded_number_of_times() -> None:
    """The estimator is sampled once per grid point, never per step."""
    est = TableEstimator(PerfModel.build(TOY, TOY_GPU, efficiency=HALF))
    sample_step_table(PerfModel.build(TOY, TOY_GPU, efficiency=HALF), est, "s")
    assert est.calls < 100


def test_without_the_extra_the_roofline_is_used_and_said_so(monkeypatch) -> None:
    """No aiconfigurator-core: the roofline's table, with the reason for the report."""
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    pm = PerfModel.build(get_model("qwen3-32b"), get_gpu("h200"))
    choice = silicon_step_table(pm)
    assert choice.step_model == "roofline"
    assert choice.reason == "roofline: aiconfigurator-core not installed"
    assert choice.perf is pm


@pytest.mark.silicon
def test_silicon_extra_samples_aiconfigurator() -> None:
    """With the extra: Qwen3-32B on H200 comes from AIC's database; an MI300X does not.

    Run apart with ``-m silicon`` where the extra is installed (.ci/run does); asked for
    without it, it fails saying so rather than skip.
    """
    if not HAVE_AIC:
        pytest.fail('the silicon extra is not installed: python3 -m pip install ".[silicon]"')
    pm = PerfModel.build(get_model("qwen3-32b"), get_gpu("h200"), tp=2)
    choice = silicon_step_table(pm)
    assert choice.step_model == "silicon", choice.reason
    assert "aiconfigurator-core h200_sxm vllm" in choice.reason
    t = choice.perf.step_table
    assert t.source.startswith("silicon")
    # Same order of magnitude as the calibrated roofline (which was fitted to AIC).
    ratio = float(choice.perf.prefill_s(4096.0, 0.0) / pm.prefill_s(4096.0, 0.0))
    assert 0.7 < ratio < 1.4
    other = silicon_step_table(PerfModel.build(get_model("qwen3-32b"), get_gpu("mi300x")))
    assert other.step_model == "roofline" and "mi300x" in other.reason
