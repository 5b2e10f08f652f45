"""Load vs recompute: break-even length and bandwidth, cross-checked against Mooncake's paper."""

from __future__ import annotations

import numpy as np
import pytest
from perf_fixtures import HALF, ideal_allreduce

from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.models import get_model
from kvadvisor.perfmodel.perf import PerfModel
from kvadvisor.perfmodel.transfer import (
    KvSource,
    break_even_bandwidth_bytes_per_s,
    break_even_tokens,
    load_s,
    recompute_s,
    reference_tiers,
    share_below,
)

# Every fraction 1, no fixed costs, a sharp roofline: the peak machine Mooncake's G assumes.
PEAK = HALF.with_values(
    "peak, as the Mooncake paper's G",
    **{k: 1.0 for k in HALF.as_dict() if k.endswith("efficiency")},
    roofline_sharpness=50.0,
    gemm_sharpness=50.0,
    moe_half_efficiency_width=0.0,
    attention_ns_per_token_head=0.0,
    layer_overhead_us=0.0,
    prefill_attention_layer_us=0.0,
    decode_attention_layer_us=0.0,
    step_overhead_us=0.0,
    allreduce=ideal_allreduce(),
)


@pytest.mark.parametrize(("gpu", "published_gbps"), [("a800", 6.0), ("h800", 19.0)])
def test_break_even_bandwidth_against_mooncake(gpu: str, published_gbps: float) -> None:
    """Mooncake FAST'25's break-even bandwidths from the FLOP count, within 15 %.

    LLaMA3-70B, 8192-token prefix, 8 GPUs at peak FLOP/s and nothing else (the paper's G): 6 GB/s
    (A800) and 19 GB/s (H800). Our FLOPs: 2 x body parameters per token plus attention.
    """
    pm = PerfModel.build(get_model("llama-3.1-70b"), get_gpu(gpu), tp=8, efficiency=PEAK)
    p = np.asarray(8192.0)
    flops_s = pm.prefill_flops(p, np.asarray(0.0)) / (8 * pm.gpu.peak_flops("bf16"))
    got = float(pm.kv_rank_bytes(p) * 8 / flops_s) / 1e9
    assert got == pytest.approx(published_gbps, rel=0.15)


def test_full_model_break_even_is_below_the_flops_only_figure() -> None:
    """The step model also pays the TP all-reduces and norms when it recomputes.

    So recompute is slower and loading pays off at a lower bandwidth than the FLOP count says
    (a few GB/s on 8 x A800).
    """
    pm = PerfModel.build(get_model("llama-3.1-70b"), get_gpu("a800"), tp=8, efficiency=PEAK)
    full = break_even_bandwidth_bytes_per_s(pm, 8192) / 1e9
    assert 2.0 < full < 6.0


def test_break_even_tokens_is_the_crossing() -> None:
    """Below the break-even length recompute is faster, at and above it loading is."""
    pm = PerfModel.build(get_model("qwen2.5-7b"), get_gpu("h200"), tp=1)
    slow = KvSource("slow", 0.5e9, 2e-3, False, "test")
    p = break_even_tokens(pm, slow)
    assert p is not None and p > 1
    assert load_s(pm, slow, np.asarray(p)) <= recompute_s(pm, np.asarray(p))
    assert load_s(pm, slow, np.asarray(p - 1)) > recompute_s(pm, np.asarray(p - 1))


def test_break_even_extremes() -> None:
    """A fast tier wins from one token; a hopeless one never wins."""
    pm = PerfModel.build(get_model("llama-3.1-70b"), get_gpu("h200"), tp=2)
    assert break_even_tokens(pm, reference_tiers(pm.gpu)[0]) == 1.0
    hopeless = KvSource("tape", 1.0, 100.0, False, "test")
    assert break_even_tokens(pm, hopeless, max_tokens=1 << 16) is None
    assert break_even_bandwidth_bytes_per_s(pm, 16, latency_s=100.0) is None


def test_per_gpu_tier_moves_rank_bytes() -> None:
    """A per-GPU link carries one rank's KV; a shared one carries every rank's."""
    pm = PerfModel.build(get_model("llama-3.1-70b"), get_gpu("h200"), tp=8)
    per_gpu = KvSource("a", 1e9, 0.0, True, "t")
    shared = KvSource("b", 1e9, 0.0, False, "t")
    assert load_s(pm, per_gpu, np.asarray(1000.0)) == pytest.approx(1000 * 40_960 / 1e9)
    assert load_s(pm, shared, np.asarray(1000.0)) == pytest.approx(1000 * 327_680 / 1e9)


def test_share_below() -> None:
    """Share of hit tokens in hits shorter than the threshold."""
    hits = np.asarray([0, 10, 100, 1000])
    assert share_below(hits, 101) == pytest.approx(110 / 1110)
    assert share_below(hits, None) == 1.0
    assert share_below(np.zeros(3), 5) is None
