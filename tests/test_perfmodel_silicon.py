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
    assert table.source.startswith("silicon: fake; steps past 32,768 tokens follow the roofline")
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


def test_past_the_sampled_grid_the_token_part_follows_the_roofline() -> None:
    """Past 32k tokens: the table's 32k value times the roofline's growth, not extrapolated.

    The estimator's 'silicon' pass is 4 times dearer at 32k (the last sampled point), so the
    last segment is steep; a 1M-token step must still scale as the roofline.
    """
    truth = PerfModel.build(TOY, TOY_GPU, tp=2, efficiency=HALF)
    est = TableEstimator(truth)
    plain = est.prefill_ms

    def steep(batch: int, isl: int, prefix: int) -> float:
        return plain(batch, isl, prefix) * (4.0 if batch * isl >= 2**15 else 1.0)

    est.prefill_ms = steep  # type: ignore[method-assign]
    table = sample_step_table(truth, est, "silicon: fake")
    last = float(table.tokens_time_s(2.0**15))
    roof = truth.tokens_s(np.array([2.0**15, 2.0**20]))
    assert float(table.tokens_time_s(2.0**20)) == pytest.approx(last * roof[1] / roof[0], rel=1e-9)
    # Extended along the steep last segment it would be over twice that.
    prev = float(table.tokens_grid[table.tokens_grid < 2**15][-1])
    slope = (last - float(table.tokens_time_s(prev))) / (2**15 - prev)
    assert float(table.tokens_time_s(2.0**20)) * 2 < last + slope * (2**20 - 2**15)


def test_token_part_is_sampled_in_prompts_of_at_most_16k() -> None:
    """32k tokens are asked for as 2 prompts of 16k (AIC's attention grid ends at 16k)."""
    pm = PerfModel.build(TOY, TOY_GPU, efficiency=HALF)
    est = TableEstimator(pm)
    asked: list[tuple[int, int, int]] = []
    plain = est.prefill_ms

    def record(batch: int, isl: int, prefix: int) -> float:
        asked.append((batch, isl, prefix))
        return plain(batch, isl, prefix)

    est.prefill_ms = record  # type: ignore[method-assign]
    sample_step_table(pm, est, "s")
    assert (2, 16384, 0) in asked
    assert max(isl - prefix for _, isl, prefix in asked) <= 16384


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


def test_quant_modes_follow_the_deployment_dtypes() -> None:
    """Block FP8 asks AIC for fp8_block, per-tensor for fp8; MXFP4 experts and FP8 KV too."""
    from kvadvisor.perfmodel.silicon import quant_modes

    h200 = get_gpu("h200")
    block = PerfModel.build(get_model("qwen3-32b"), h200, weight_dtype="fp8", kv_dtype="fp8")
    assert quant_modes(block) == (
        {"gemm_quant_mode": "fp8_block", "kvcache_quant_mode": "fp8"},
        None,
    )
    tensor = PerfModel.build(get_model("qwen3-32b"), h200, weight_dtype="fp8-tensor")
    assert quant_modes(tensor)[0]["gemm_quant_mode"] == "fp8"
    oss = PerfModel.build(get_model("gpt-oss-120b"), h200, tp=2)
    assert quant_modes(oss)[0] == {
        "gemm_quant_mode": "bfloat16",
        "moe_quant_mode": "w4a16_mxfp4",
        "kvcache_quant_mode": "bfloat16",
    }
    fp16_kv = PerfModel.build(get_model("qwen3-32b"), h200, kv_dtype="fp16")
    assert quant_modes(fp16_kv) == ({}, "AIConfigurator has no KV quantization for fp16")


def test_a_mode_the_database_lacks_is_named() -> None:
    """AIC's A100 vLLM data measures bf16 only: FP8 weights or KV are refused, by name."""
    from kvadvisor.perfmodel.silicon import uncovered

    a100 = {"gemm": ["bfloat16"], "moe": ["bfloat16"], "generation_attention": ["bfloat16"]}
    modes = {"gemm_quant_mode": "bfloat16", "kvcache_quant_mode": "fp8"}
    assert uncovered(modes, a100, is_moe=False, is_mla=False) == (
        "no fp8 KV-cache attention kernels (measured: bfloat16)"
    )
    # MLA attention has its own modules: the KV dtype is not checked against GQA kernels.
    assert uncovered(modes, a100, is_moe=False, is_mla=True) is None
    moe = {**modes, "kvcache_quant_mode": "bfloat16", "moe_quant_mode": "w4a16_mxfp4"}
    assert uncovered(moe, a100, is_moe=True, is_mla=False) == (
        "no w4a16_mxfp4 MoE kernels (measured: bfloat16)"
    )


@pytest.mark.silicon
def test_silicon_extra_times_fp8_as_fp8_and_refuses_what_it_lacks() -> None:
    """FP8 weights are timed with FP8 kernels; a mode AIC lacks falls back and says why.

    Qwen3-32B FP8 on H200: faster prefill than BF16's table. FP8 KV on A100: AIC's A100 data
    has no such kernels.
    """
    if not HAVE_AIC:
        pytest.fail('the silicon extra is not installed: python3 -m pip install ".[silicon]"')
    h200 = get_gpu("h200")
    bf16 = silicon_step_table(PerfModel.build(get_model("qwen3-32b"), h200))
    fp8 = silicon_step_table(PerfModel.build(get_model("qwen3-32b"), h200, weight_dtype="fp8"))
    assert fp8.step_model == "silicon", fp8.reason
    assert "fp8_block weights" in fp8.reason
    t_bf16 = float(bf16.perf.prefill_s(8192.0, 0.0))
    assert float(fp8.perf.prefill_s(8192.0, 0.0)) < 0.85 * t_bf16
    a100 = PerfModel.build(get_model("qwen3-32b"), get_gpu("a100-80gb"), tp=2, kv_dtype="fp8")
    refused = silicon_step_table(a100)
    assert refused.step_model == "roofline" and refused.perf is a100
    assert "silicon table refused" in refused.reason and "fp8 KV-cache" in refused.reason
