"""Roofline stage model: hand-computed FLOPs, prefill and decode times, MoE weights touched."""

from __future__ import annotations

import numpy as np
import pytest

from kvadvisor.catalog.gpus import GpuSpec, get_gpu
from kvadvisor.catalog.models import ModelSpec, get_model
from kvadvisor.errors import ConfigError
from kvadvisor.perfmodel.efficiency import Efficiency, default_efficiency
from kvadvisor.perfmodel.perf import PerfModel

# A toy model and GPU with round numbers so every expectation is computable by hand.
TOY = ModelSpec(name="toy", display_name="toy", attention="gqa", layers=2, q_heads=4,
                kv_heads=2, head_dim=8, total_params=1e9, active_params=1e9)
TOY_GPU = GpuSpec(name="toy-gpu", display_name="toy", bf16_dense_tflops=100.0,
                  fp8_dense_tflops=200.0, memory_gb=10.0, memory_bandwidth_gbps=1000.0,
                  pcie_gbps=10.0)
HALF = Efficiency(prefill_mfu=0.5, decode_mfu=0.25, memory=0.5, source="test")


def toy(tp: int = 1, model: ModelSpec = TOY) -> PerfModel:
    """The toy deployment at the HALF efficiency factors."""
    return PerfModel.build(model, TOY_GPU, tp=tp, efficiency=HALF)


def test_prefill_flops_by_hand() -> None:
    """10 new tokens after 5 cached: 2*1e9*10 matmul + 2*4*(8+8) per pair per layer x pairs.

    Pairs per layer: new tokens sit at positions 6..15 and attend 6..15 keys: 105; 2 layers.
    """
    flops = toy().prefill_flops(np.asarray(10.0), np.asarray(5.0))
    assert flops == 2e9 * 10 + 2 * 4 * 16 * (2 * 105)


def test_attention_pairs_match_brute_force_with_windows() -> None:
    """Window-capped pairs equal a per-token loop (4 full layers, 2 windowed at 7 tokens)."""
    model = ModelSpec(name="w", display_name="w", attention="gqa", layers=6, q_heads=1,
                      kv_heads=1, head_dim=1, total_params=1.0, active_params=1.0,
                      sliding_window_tokens=7, sliding_window_layers=2)
    pm = toy(model=model)
    for cached, new in [(0, 1), (0, 20), (3, 4), (10, 30), (6, 1)]:
        brute = sum(4 * t + 2 * min(t, 7) for t in range(cached + 1, cached + new + 1))
        assert pm.attention_pairs(np.asarray(float(new)), np.asarray(float(cached))) == brute


def test_prefill_time_roofline() -> None:
    """Long prefill is compute-bound; a 1-token prefill is bounded by reading the weights."""
    pm = toy(tp=2)
    long = pm.prefill_s(np.asarray(100_000.0), np.asarray(0.0))
    assert long == pytest.approx(pm.prefill_flops(np.asarray(100_000.0), np.asarray(0.0))
                                 / (2 * 100e12 * 0.5))
    one = pm.prefill_s(np.asarray(1.0), np.asarray(0.0))
    assert one == pytest.approx(2e9 / (2 * 1000e9 * 0.5))  # 2 GB of bf16 weights over 2 GPUs


def test_decode_step_memory_bound_by_hand() -> None:
    """Batch 4 holding 1 MB of KV per rank: (2 GB weights / 1 + 1 MB) / (1 TB/s x 0.5)."""
    step = toy().decode_step_s(np.asarray(4.0), np.asarray(1e6))
    assert step == pytest.approx((2e9 + 1e6) / 0.5e12)


def test_decode_turns_compute_bound_at_large_batch() -> None:
    """At a huge batch the FLOPs exceed the memory time and set the step."""
    pm = toy()
    b = np.asarray(100_000.0)
    kv = np.asarray(0.0)
    assert pm.decode_step_s(b, kv) == pytest.approx(2e9 * 1e5 / (100e12 * 0.25))


def test_decode_gpu_share_by_hand() -> None:
    """A request pays 1/B of each weight read plus its own KV.

    3 steps from context 10 in a batch of 4: (3 x 2e9 / 4 + sum_k kv(11 + k)) / 0.5e12.
    """
    pm = toy()
    per_token = 2 * 2 * 2 * 8 * 2  # 2 (K,V) x layers x kv_heads x head_dim x bf16
    own = per_token * (11 + 12 + 13)
    got = pm.decode_gpu_s(np.asarray(10.0), np.asarray(3.0), np.asarray(4.0))
    assert got == pytest.approx((3 * 2e9 / 4 + own) / 0.5e12)


def test_moe_weights_touched() -> None:
    """One token reads the active parameters; a large batch reads all of them."""
    pm = PerfModel.build(get_model("qwen3-235b-a22b"), get_gpu("h200"), tp=8)
    assert pm.weight_bytes_read(np.asarray(1.0)) == pytest.approx(22e9 * 2)
    assert pm.weight_bytes_read(np.asarray(10_000.0)) == pytest.approx(235e9 * 2, rel=1e-6)
    mid = pm.weight_bytes_read(np.asarray(16.0))
    assert 22e9 * 2 < mid < 235e9 * 2


def test_fp8_weights_use_fp8_peak_and_half_bytes() -> None:
    """FP8 weights: half the bytes, the FP8 tensor-core peak."""
    pm = PerfModel.build(TOY, TOY_GPU, weight_dtype="fp8", efficiency=HALF)
    assert pm.weight_bytes == 1e9
    assert pm.peak_flops == 200e12


def test_default_efficiency_sources() -> None:
    """BLIS MFU per GPU where profiled, same silicon mapped, H100 figures otherwise."""
    assert (default_efficiency("a100-80gb").prefill_mfu, default_efficiency("a100-80gb").decode_mfu
            ) == (0.38, 0.18)
    assert default_efficiency("h800").prefill_mfu == 0.45
    eff = default_efficiency("l20")
    assert eff.prefill_mfu == 0.45 and "not profiled" in eff.source
    assert eff.memory == 0.8


@pytest.mark.parametrize(
    ("field", "value"),
    [("prefill_mfu", 0.0), ("decode_mfu", 1.5), ("memory", -0.1)],
)
def test_efficiency_outside_unit_interval_is_a_config_error(field: str, value: float) -> None:
    """An efficiency factor outside (0, 1] would divide by zero or beat the roofline: refused."""
    import dataclasses

    bad = dataclasses.replace(HALF, **{field: value})
    with pytest.raises(ConfigError, match=rf"efficiency {field} must be in \(0, 1\], got {value}"):
        PerfModel.build(TOY, TOY_GPU, efficiency=bad)
    # The exact bound 1 is allowed.
    edge = PerfModel.build(TOY, TOY_GPU, efficiency=dataclasses.replace(HALF, **{field: 1.0}))
    assert getattr(edge.efficiency, field) == 1.0


def test_build_refuses_tp_zero() -> None:
    """TP 0 has no GPU to run on: a user error before any KV size is computed."""
    with pytest.raises(ConfigError, match="--tp must be at least 1, got 0"):
        PerfModel.build(TOY, TOY_GPU, tp=0, efficiency=HALF)
