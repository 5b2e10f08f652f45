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
TOY = ModelSpec(
    name="toy",
    display_name="toy",
    attention="gqa",
    layers=2,
    q_heads=4,
    kv_heads=2,
    head_dim=8,
    total_params=1e9,
    active_params=1e9,
)
TOY_GPU = GpuSpec(
    name="toy-gpu",
    display_name="toy",
    bf16_dense_tflops=100.0,
    fp8_dense_tflops=200.0,
    memory_gb=10.0,
    memory_bandwidth_gbps=1000.0,
    pcie_gbps=10.0,
)
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
    model = ModelSpec(
        name="w",
        display_name="w",
        attention="gqa",
        layers=6,
        q_heads=1,
        kv_heads=1,
        head_dim=1,
        total_params=1.0,
        active_params=1.0,
        sliding_window_tokens=7,
        sliding_window_layers=2,
    )
    pm = toy(model=model)
    for cached, new in [(0, 1), (0, 20), (3, 4), (10, 30), (6, 1)]:
        brute = sum(4 * t + 2 * min(t, 7) for t in range(cached + 1, cached + new + 1))
        assert pm.attention_pairs(np.asarray(float(new)), np.asarray(float(cached))) == brute


def test_prefill_time_roofline() -> None:
    """Long prefill is compute-bound; a 1-token prefill is bounded by reading the weights."""
    pm = toy(tp=2)
    long = pm.prefill_s(np.asarray(100_000.0), np.asarray(0.0))
    assert long == pytest.approx(
        pm.prefill_flops(np.asarray(100_000.0), np.asarray(0.0)) / (2 * 100e12 * 0.5)
    )
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
    assert (
        default_efficiency("a100-80gb").prefill_mfu,
        default_efficiency("a100-80gb").decode_mfu,
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


def test_build_refuses_an_unknown_weight_dtype() -> None:
    """A weight dtype with no known size is a user error that lists the choices."""
    with pytest.raises(ConfigError, match="unknown weight dtype 'fp6'; choose one of bf16, "):
        PerfModel.build(TOY, TOY_GPU, weight_dtype="fp6", efficiency=HALF)


def test_build_refuses_tp_zero() -> None:
    """TP 0 has no GPU to run on: a user error before any KV size is computed."""
    with pytest.raises(ConfigError, match="--tp must be at least 1, got 0"):
        PerfModel.build(TOY, TOY_GPU, tp=0, efficiency=HALF)


# Shapes from each model's Hugging Face config.json (hidden_size, intermediate_size,
# num_hidden_layers, num_attention_heads, num_key_value_heads, vocab_size; untied embeddings),
# independent of the catalog, which stores only rounded published parameter counts.
CONFIG_SHAPES = {
    "llama-3.1-8b": dict(hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8, vocab=128256),
    "llama-3.1-70b": dict(hidden=8192, ffn=28672, layers=80, heads=64, kv_heads=8, vocab=128256),
    "llama-3.1-405b": dict(
        hidden=16384, ffn=53248, layers=126, heads=128, kv_heads=8, vocab=128256
    ),
}
MIXTRAL = dict(hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8, vocab=32000)


def _decoder_params(
    hidden: int, ffn: int, layers: int, heads: int, kv_heads: int, vocab: int, experts: int = 1
) -> tuple[int, int]:
    """(shared, one expert's) parameters of a Llama-style decoder, counted from its shape.

    Per layer: q and o projections hidden² each, k and v hidden × kv_heads × head_dim each,
    two RMSNorm vectors, a router hidden × experts when there are experts; per expert a SwiGLU
    MLP 3 × hidden × ffn per layer. Plus the input embedding and LM head (vocab × hidden each)
    and the final norm.
    """
    kv = hidden // heads * kv_heads
    attention = 2 * hidden * hidden + 2 * hidden * kv
    router = hidden * experts if experts > 1 else 0
    shared = layers * (attention + 2 * hidden + router) + 2 * vocab * hidden + hidden
    return shared, layers * 3 * hidden * ffn


@pytest.mark.parametrize("name", sorted(CONFIG_SHAPES))
def test_dense_flops_per_token_from_config_shapes(name: str) -> None:
    """2 × parameters per token, the parameters counted from config.json: within 1 %.

    The hand counts are 8.03, 70.55 and 405.85 billion (Meta publishes 8.03B, 70.6B, 405B);
    the catalog rounds them to 8, 70 and 405.
    """
    shared, mlp = _decoder_params(**CONFIG_SHAPES[name])
    pm = PerfModel.build(get_model(name), get_gpu("h200"), tp=8)
    assert pm.flops_per_token == pytest.approx(2.0 * (shared + mlp), rel=0.01)
    assert pm.weight_bytes == pytest.approx(2.0 * (shared + mlp), rel=0.01)  # bf16


def test_mixtral_weights_touched_from_config_shape() -> None:
    """Mixtral-8x7B (8 experts, top 2): active FLOPs and the weights a batch reads, by hand.

    From config.json: shared 1.606B, each expert 5.637B over all layers; total 46.70B and
    active 12.88B (Mistral publishes 46.7B and 12.9B). A forward pass over B tokens reads the
    shared part and, under uniform routing, ``8 × (1 − (6/8)^B)`` experts' weights.
    """
    shared, expert = _decoder_params(**MIXTRAL, experts=8)
    assert (shared + 8 * expert) / 1e9 == pytest.approx(46.70, abs=0.01)
    assert (shared + 2 * expert) / 1e9 == pytest.approx(12.88, abs=0.01)
    pm = PerfModel.build(get_model("mixtral-8x7b"), get_gpu("h200"), tp=2)
    assert pm.flops_per_token == pytest.approx(2.0 * (shared + 2 * expert), rel=0.01)
    for batch in (1, 2, 4, 64):
        touched = 8 * (1 - 0.75**batch)
        got = pm.weight_bytes_read(np.asarray(float(batch)))
        assert got == pytest.approx(2.0 * (shared + touched * expert), rel=0.01)
