"""Step-time model: every term against a hand computation on a toy model and GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from perf_fixtures import BODY, BW, HALF, HEAD, PEAK, TOY, TOY_ALLREDUCE, TOY_GPU

from kvadvisor.catalog.efficiency import efficiency_for
from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.models import ModelSpec, get_model
from kvadvisor.errors import ConfigError
from kvadvisor.perfmodel.perf import PerfModel, soft_roofline, tile_tokens


def toy(tp: int = 1, model: ModelSpec = TOY, **kw) -> PerfModel:
    """The toy deployment at the HALF coefficients."""
    return PerfModel.build(model, TOY_GPU, tp=tp, efficiency=HALF, **kw)


def test_soft_roofline_limits() -> None:
    """P = 1 adds, p = 2 is the Euclidean norm, a large p tends to the max."""
    assert soft_roofline(np.array(3.0), np.array(4.0), 1.0) == pytest.approx(7.0)
    assert soft_roofline(np.array(3.0), np.array(4.0), 2.0) == pytest.approx(5.0)
    assert soft_roofline(np.array(3.0), np.array(4.0), 200.0) == pytest.approx(4.0, rel=1e-2)
    assert soft_roofline(np.array(0.0), np.array(4.0), 3.0) == pytest.approx(4.0)


def test_parameters_by_role() -> None:
    """The toy's counts by hand; the head is separate from the body, the embedding a lookup."""
    p = TOY.params
    assert (p.attention, p.dense_mlp, p.embedding, p.lm_head) == (3_072, 6_144, HEAD, HEAD)
    assert p.body_active == BODY and p.total == BODY + 2 * HEAD
    assert toy().flops_per_token == 2 * BODY
    assert toy().head_flops_per_logit == 2 * HEAD


def test_fixed_overhead_by_hand() -> None:
    """Step 100 us + 2 layers x 10 us; MoE, MLA and FP8 layers add their own."""
    assert toy()._fixed_s() == pytest.approx(120e-6)
    assert toy(weight_dtype="fp8")._fixed_s() == pytest.approx((120 + 2 * 40) * 1e-6)


def test_dense_gemm_term_by_hand() -> None:
    """P = 1: 2 T W / (tp F eta) + W w / (tp BW eta); TP halves both."""
    t = np.array([1.0, 1000.0])
    expect = 2 * t * BODY / PEAK + BODY * 2 / BW
    assert toy()._dense_gemm_s(t) == pytest.approx(expect)
    assert toy(tp=2)._dense_gemm_s(t) == pytest.approx(expect / 2)


def test_gemm_tile_floor_by_hand() -> None:
    """A tile floor of m0 rows: T / (1 - e^(-T/m0)) rows, max of compute and read at large p."""
    assert tile_tokens(np.array([5.0]), 0.0) == pytest.approx([5.0])
    # 1 row of 200: 1 / (1 - e^-0.005) = 200.5 rows; 4,000 rows: 4,000 / (1 - e^-20).
    assert tile_tokens(np.array([1.0, 4000.0]), 200.0) == pytest.approx([200.5, 4000.0], rel=1e-4)
    eff = dataclasses.replace(HALF, gemm_sharpness=200.0, gemm_tile_tokens=200.0)
    pm = PerfModel.build(TOY, TOY_GPU, efficiency=eff)
    read = BODY * 2 / BW
    rows = np.array([1.0, 4000.0])
    compute = 2 * np.array([200.5, 4000.0]) * BODY / PEAK
    assert pm._dense_gemm_s(rows) == pytest.approx(np.maximum(compute, read), rel=1e-2)


def test_fp8_weights_use_the_fp8_peak_and_one_byte() -> None:
    """FP8 dense weights: the FP8 peak (200 TFLOP/s), 1 byte each; tables stay 16-bit."""
    pm = toy(weight_dtype="fp8")
    t = np.array([1000.0])
    assert pm._dense_gemm_s(t) == pytest.approx(2 * 1000 * BODY / (200e12 * 0.5) + BODY / BW)
    assert pm.weight_bytes == BODY * 1 + 2 * HEAD * 2


def test_elementwise_term_by_hand() -> None:
    """Per token: 8 hidden vectors per layer (norms) + 3 MLP-width vectors (activation), bf16."""
    per_token = (8 * 32 * 2 + 3 * 64 * 2) * 2
    assert toy()._elementwise_s(np.array(10.0)) == pytest.approx(10 * per_token / BW)
    per_token_tp2 = (8 * 32 * 2 + 3 * 64 * 2 / 2) * 2
    assert toy(tp=2)._elementwise_s(np.array(10.0)) == pytest.approx(10 * per_token_tp2 / BW)


def test_allreduce_table_by_hand() -> None:
    """The toy table: linear between sizes, proportional past the last, clamped below the first.

    TP 4 at 32,032 bytes: halfway from 5 to 20 us on a straight line (12.5 us); 1,280,000
    bytes, twice the last size: 2 x 100 us; 10 bytes: the first size's 5 us.
    """
    ar, link = TOY_ALLREDUCE, 50e9
    got = ar.time_s(4, np.array([32_032.0, 1_280_000.0, 10.0]), link) * 1e6
    assert got == pytest.approx([12.5, 200.0, 5.0])
    assert ar.time_s(1, np.array(64_000.0), link) == 0.0


def test_allreduce_table_between_and_beyond_measured_tp() -> None:
    """TP 6: log2-linear between TP 4 and 8; TP 16: TP 8's part above latency x the ring factor.

    At 64,000 bytes: TP 6 weighs TP 8 by w = log2(6) - 2 (20 + 20 w us, latency 5 + w);
    TP 16: 6 + (40 - 6) x (15/16) / (7/8) us.
    """
    ar, link = TOY_ALLREDUCE, 50e9
    w = np.log2(6) - 2
    assert ar.time_s(6, np.array(64_000.0), link) * 1e6 == pytest.approx(20 + 20 * w)
    assert ar.latency_s(6, link) * 1e6 == pytest.approx(5 + w)
    ring = (15 / 16) / (7 / 8)
    assert ar.time_s(16, np.array(64_000.0), link) * 1e6 == pytest.approx(6 + 34 * ring)


def test_allreduce_table_rescaled_to_another_link() -> None:
    """A link half as fast doubles the part above the latency: TP 4, 64,000 bytes, 5 + 2 x 15."""
    got = TOY_ALLREDUCE.time_s(4, np.array(64_000.0), 25e9) * 1e6
    assert got == pytest.approx(35.0)
    assert TOY_ALLREDUCE.latency_s(4, 25e9) * 1e6 == pytest.approx(5.0)


def test_allreduce_term_by_hand() -> None:
    """TP 4: 2 per layer + 1 after the embedding, each T h 2 bytes from the table; none at TP 1.

    1,000 toy tokens are 1,000 x 32 x 2 = 64,000 bytes: 20 us at TP 4, 40 us at TP 8.
    """
    t = np.array(1000.0)
    assert toy(tp=4)._allreduce_s(t) == pytest.approx((2 * 2 + 1) * 20e-6)
    assert toy(tp=8)._allreduce_s(t) == pytest.approx((2 * 2 + 1) * 40e-6)
    assert toy()._allreduce_s(t) == 0.0
    assert toy(tp=4).allreduces == 5 and toy().allreduces == 0


def test_allreduce_uses_pcie_without_nvlink() -> None:
    """A GPU without NVLink all-reduces over its PCIe link (10 GB/s one way).

    The toy table, measured at 50 GB/s, then runs 5x slower above its latency.
    """
    pm = PerfModel.build(TOY, dataclasses.replace(TOY_GPU, nvlink_gbps=0.0), tp=2, efficiency=HALF)
    assert pm.link_bytes_per_s == 10e9
    assert pm.allreduce_one_s(np.array(1000.0)) == pytest.approx((5 + 5 * 5) * 1e-6)


def test_attention_token_term_and_pair_time() -> None:
    """1 ns per token, head and layer; a pair costs 2 (4/tp)(8+8) FLOPs at 50 TFLOP/s."""
    assert toy()._attention_tokens_s(np.array(100.0)) == pytest.approx(100 * 4 * 2 * 1e-9)
    assert toy().s_per_pair == pytest.approx(2 * 4 * 16 / PEAK)
    assert toy(tp=2).s_per_pair == pytest.approx(2 * 2 * 16 / PEAK)


def test_head_only_for_sequences_with_logits() -> None:
    """The LM head: 2 L V h / F + V h 2 bytes / BW for L > 0, nothing for L = 0."""
    got = toy().head_s(np.array([0.0, 1.0, 64.0]))
    expect = 2 * np.array([1.0, 64.0]) * HEAD / PEAK + HEAD * 2 / BW
    assert got[0] == 0.0
    assert got[1:] == pytest.approx(expect)


def test_prefill_flops_count_the_head_once_and_no_embedding() -> None:
    """10 new after 5 cached: 2 x body x 10 + one head + 2*4*(8+8) per pair x 210 pairs."""
    flops = toy().prefill_flops(np.asarray(10.0), np.asarray(5.0))
    assert flops == 2 * BODY * 10 + 2 * HEAD + 2 * 4 * 16 * (2 * 105)


def test_llama_prefill_flops_no_longer_count_embedding_and_head_per_token() -> None:
    """Llama-3.1-8B: body matmuls are 6.98B of 8.03B; the old 2 x P rule overcounted 15 %."""
    pm = PerfModel.build(get_model("llama-3.1-8b"), get_gpu("h200"))
    body = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert pm.flops_per_token == 2 * body
    assert 2 * 8.03e9 / pm.flops_per_token - 1 == pytest.approx(0.15, abs=0.01)


def test_decode_kv_read_and_mla_compute_bound() -> None:
    """GQA reads KV at BW eta; DeepSeek at TP 1 (128 heads on one latent) is compute-bound."""
    assert toy().decode_s_per_kv_byte == pytest.approx(1 / BW)
    ds = PerfModel.build(get_model("deepseek-v3"), TOY_GPU, kv_dtype="fp8", efficiency=HALF)
    flops_per_byte = 2 * 128 * (2 * 512 + 64) / 576
    assert ds.decode_s_per_kv_byte == pytest.approx(flops_per_byte / PEAK)
    ds8 = PerfModel.build(get_model("deepseek-v3"), TOY_GPU, tp=8, kv_dtype="fp8", efficiency=HALF)
    assert ds8.decode_s_per_kv_byte == pytest.approx(max(1 / BW, flops_per_byte / 8 / PEAK))


def test_lone_prefill_and_decode_are_the_step_table() -> None:
    """prefill_s and decode_step_s evaluate the same table the replay samples."""
    pm = toy(tp=2)
    t = pm.step_table
    new, cached = np.array([7.0, 300.0]), np.array([5.0, 0.0])
    pairs = t.attention_pairs(new, cached)
    assert pm.prefill_s(new, cached) == pytest.approx(t.step_s(new, pairs, 0.0, 1.0))
    b, kv = np.array([1.0, 8.0]), np.array([1e6, 8e6])
    assert pm.decode_step_s(b, kv) == pytest.approx(t.step_s(b, 0.0, kv, b))


def test_step_by_hand_on_the_grid() -> None:
    """A 64-token prefill at TP 1, every term added by hand (64 is a grid point)."""
    pm = toy()
    t = 64.0
    pairs = 2 * 64 * 65 / 2
    expect = (
        120e-6
        + 2 * t * BODY / PEAK
        + BODY * 2 / BW
        + t * (8 * 32 * 2 + 3 * 64 * 2) * 2 / BW
        + t * 4 * 2 * 1e-9
        + 2 * HEAD / PEAK
        + HEAD * 2 / BW
        + pairs * 2 * 4 * 16 / PEAK
        + 2 * 3e-6  # prefill attention floor: 2 layers x 3 us
    )
    assert pm.prefill_s(np.asarray(t), np.asarray(0.0)) == pytest.approx(expect)


def test_prefill_compute_is_the_token_proportional_part() -> None:
    """Recomputing p tokens: matmul FLOPs, norms, all-reduce bandwidth, attention; no fixed costs.

    TP 2, p = 100 after 0: by hand from the HALF coefficients; the all-reduces' part above
    their latency (6,400-byte messages, 5 per step, on the toy table's 64-to-64,000-byte line
    from 5 to 10 us).
    """
    pm = toy(tp=2)
    p = 100.0
    expect = (
        2 * p * BODY / 2 / PEAK
        + p * (8 * 32 * 2 + 3 * 64 * 2 / 2) * 2 / BW
        + 5 * (p * 32 * 2 - 64) / (64_000 - 64) * 5e-6
        + p * 2 * 2 * 1e-9
        + 2 * (p * (p + 1) / 2) * 2 * 2 * 16 / PEAK
    )
    assert pm.prefill_compute_s(np.asarray(p), np.asarray(0.0)) == pytest.approx(expect)


def test_decode_gpu_share_by_hand() -> None:
    """3 steps from context 10, batch 4: 3 (tokens(4) + head(4) + floor) / 4 + own KV / BW."""
    pm = toy()
    t = pm.step_table
    per_token = 2 * 2 * 2 * 8 * 2  # K and V x layers x kv_heads x head_dim x bf16
    own = per_token * (11 + 12 + 13)
    shared = (float(t.tokens_time_s(4.0)) + float(t.logits_time_s(4.0)) + 2 * 2e-6) / 4
    got = pm.decode_gpu_s(np.asarray(10.0), np.asarray(3.0), np.asarray(4.0))
    assert got == pytest.approx(3 * shared + own / BW)


MOE = dataclasses.replace(
    TOY,
    name="moe",
    experts=8,
    experts_per_token=2,
    moe_intermediate_size=16,
    total_params=1.0,
    active_params=0.5,
)


def test_expert_term_by_hand() -> None:
    """8 experts of 3*32*16 = 1,536, top 2, 2 MoE layers: T tokens touch 8 (1 - (6/8)^T)."""
    pm = toy(model=MOE)
    expert = 3 * 32 * 16
    for tokens in (1.0, 3.0, 40.0):
        touched = 8 * (1 - 0.75**tokens)
        compute = 2 * expert * tokens * 2 / PEAK
        memory = touched * expert * 2 / BW
        assert pm._experts_s(np.array(tokens)) == pytest.approx(2 * (compute + memory))


def test_expert_parallel_rank_and_imbalance() -> None:
    """EP 4 of TP 4: the busiest rank gets T k / 4 x (1 + 0.5 log2 4 / sqrt(8/4)) tokens."""
    eff = dataclasses.replace(HALF, expert_imbalance=0.5)
    pm = PerfModel.build(MOE, TOY_GPU, tp=4, ep=4, efficiency=eff)
    expert = 3 * 32 * 16
    tokens, imb = 10.0, 1.0 + 0.5 * 2 / 2**0.5
    compute = 2 * expert * tokens * 2 / 4 * imb / PEAK
    touched = 8 / 4 * (1 - 0.75 ** (tokens * imb))
    memory = touched * expert * 2 / BW
    assert pm._experts_s(np.array(tokens)) == pytest.approx(2 * (compute + memory))


def test_expert_imbalance_is_capped_at_every_token_on_the_busiest_rank() -> None:
    """EP 8 of 8 experts, top 2: the power law says 1 + 3 log2 8 / 1 = 10x, a rank can take 4x.

    One expert per rank takes at most all T tokens, against a mean of T x 2 / 8.
    """
    eff = dataclasses.replace(HALF, expert_imbalance=3.0)
    pm = PerfModel.build(MOE, TOY_GPU, tp=8, ep=8, efficiency=eff)
    assert pm._expert_imbalance() == pytest.approx(4.0)
    expert, tokens = 3 * 32 * 16, 1e6  # compute-bound
    compute = 2 * expert * tokens * 2 / 8 * 4.0 / PEAK
    assert pm._expert_compute_s(np.array(tokens)) == pytest.approx(2 * compute)
    # Below the cap the power law stands (EP 2: 4 experts a rank, cap 2 x 2 / 2 = 2).
    half = dataclasses.replace(HALF, expert_imbalance=0.5)
    mild = PerfModel.build(MOE, TOY_GPU, tp=2, ep=2, efficiency=half)
    assert mild._expert_imbalance() == pytest.approx(1.0 + 0.5 * 1 / 4**0.5)


def test_busiest_rank_reads_at_least_one_touched_expert() -> None:
    """EP 8 of 8 experts, one token: the step touches 2, so some rank reads one whole expert.

    Without the floor the imbalanced rank's expectation is 1 - (6/8)^(1 x 4) = 0.68 of its
    expert (imbalance at the cap 4); a layer waits for the rank that does read one.
    """
    eff = dataclasses.replace(HALF, expert_imbalance=3.0)
    pm = PerfModel.build(MOE, TOY_GPU, tp=8, ep=8, efficiency=eff)
    expert = 3 * 32 * 16
    compute = 2 * expert * 1.0 * 2 / 8 * 4.0 / PEAK
    memory = 1.0 * expert * 2 / BW
    assert pm._experts_s(np.array(1.0)) == pytest.approx(2 * (compute + memory))
    # EP 2 at 40 tokens: the step touches 8 (1 - 0.75^40) ~ 8, a rank at least half of them,
    # 4 (1 - 0.75^(40 x 1.5)) with the imbalance already above it: the floor does not bind.
    half = dataclasses.replace(HALF, expert_imbalance=1.0)
    ep2 = PerfModel.build(MOE, TOY_GPU, tp=2, ep=2, efficiency=half)
    imb = 1.0 + 1.0 * 1 / 4**0.5
    touched = 4 * (1 - 0.75 ** (40 * imb))
    compute = 2 * expert * 40 * 2 / 2 * imb / PEAK
    memory = touched * expert * 2 / BW
    assert ep2._experts_s(np.array(40.0)) == pytest.approx(2 * (compute + memory))


def test_narrow_experts_lose_efficiency() -> None:
    """eta_moe x w / (w + w_half): width 16 split over TP 2 = 8 columns, half width 8 -> eta/2."""
    eff = dataclasses.replace(HALF, moe_half_efficiency_width=8.0)
    wide = PerfModel.build(MOE, TOY_GPU, tp=2, efficiency=HALF)
    narrow = PerfModel.build(MOE, TOY_GPU, tp=2, efficiency=eff)
    t = np.array(1e6)  # compute-bound: the weight read is negligible
    assert narrow._experts_s(t) / wide._experts_s(t) == pytest.approx(2.0, rel=1e-3)


def test_moe_fixed_overhead_counts_moe_layers() -> None:
    """DeepSeek-V3: 58 MoE layers, 61 MLA layers and 3 dense-MLP FP8 layers add their overheads.

    The FP8 overhead is per GEMM, a quarter of the 40 us fitted per four-GEMM layer: the 3
    dense MLPs' 2 GEMMs each; MLA layers' projections are timed with their attention, whose
    fixed cost is the MLA overhead, and the shared experts' GEMMs overlap the routed ones.
    """
    pm = PerfModel.build(get_model("deepseek-v3"), TOY_GPU, tp=8, efficiency=HALF)
    assert pm._fixed_s() == pytest.approx((100 + 61 * 10 + 58 * 20 + 61 * 30 + 3 * 2 * 10) * 1e-6)


def test_fp8_overhead_per_gemm_of_dense_and_gqa_moe_layers() -> None:
    """A dense FP8 layer pays all four GEMMs' floors (40 us), a GQA MoE layer its two projections.

    TOY (2 layers, FP8 weights): 2 x 4 x 10 us; Qwen3-235B-A22B (94 MoE layers, no dense MLP,
    no shared expert): 94 x 2 x 10 us.
    """
    dense = PerfModel.build(TOY, TOY_GPU, weight_dtype="fp8", efficiency=HALF)
    assert dense._fixed_s() == pytest.approx((100 + 2 * 10 + 2 * 4 * 10) * 1e-6)
    qwen = PerfModel.build(
        get_model("qwen3-235b-a22b"), TOY_GPU, weight_dtype="fp8", efficiency=HALF
    )
    assert qwen._fixed_s() == pytest.approx((100 + 94 * 10 + 94 * 20 + 94 * 2 * 10) * 1e-6)


def test_shared_expert_fp8_floor_overlaps_the_routed_experts() -> None:
    """DeepSeek-V3 FP8 at TP 8: a MoE layer takes max(routed experts, shared expert's 2 GEMMs).

    At 800 us per four-GEMM layer the shared expert's floor is 2 x 200 us. One token: the
    routed experts read 8 experts of 3 x 7,168 x 2,048 FP8 weights split over 8 ranks (44 MB
    at 500 GB/s: 88 us) plus 2 x 44M FLOPs at 25 TFLOP/s (3.5 us), under the floor; a
    million tokens are compute-bound far above it. bf16 weights: no FP8 floor at all.
    """
    eff = dataclasses.replace(HALF, fp8_layer_overhead_us=800.0)
    pm = PerfModel.build(get_model("deepseek-v3"), TOY_GPU, tp=8, efficiency=eff)
    e = 3 * 7168 * 2048
    routed = 8 * e / 8 / BW + 2 * 8 * e / 8 / (100e12 * 0.25)
    compute, memory = pm._expert_parts(np.array(1.0))
    assert compute + memory == pytest.approx(routed)
    assert pm._experts_s(np.array(1.0)) == pytest.approx(58 * 400e-6)
    big = np.array(1e6)
    compute, memory = pm._expert_parts(big)
    assert compute + memory > 400e-6
    assert pm._experts_s(big) == pytest.approx(58 * (compute + memory))
    bf16 = PerfModel.build(
        get_model("deepseek-v3"), TOY_GPU, tp=8, weight_dtype="bf16", efficiency=eff
    )
    c16, m16 = bf16._expert_parts(np.array(1.0))
    assert bf16._experts_s(np.array(1.0)) == pytest.approx(58 * (c16 + m16))


def test_dispatch_only_for_mla_moe_at_tp_above_one() -> None:
    """Dispatch is a collective: none at TP 1, none for GQA MoE models.

    AIC's vLLM graph's two dispatch ops there are the layer's two all-reduces; DeepSeek-V3 at
    TP 8: 58 x T x 7,168 x 5 ps.
    """
    eff = dataclasses.replace(HALF, moe_dispatch_ps_per_element=5.0)
    t = np.array(1000.0)
    ds = get_model("deepseek-v3")
    assert PerfModel.build(ds, TOY_GPU, tp=8, efficiency=eff)._moe_dispatch_s(t) == pytest.approx(
        58 * 1000 * 7168 * 5e-12
    )
    assert PerfModel.build(ds, TOY_GPU, tp=1, efficiency=eff)._moe_dispatch_s(t) == 0.0
    gqa = PerfModel.build(MOE, TOY_GPU, tp=2, efficiency=eff)
    assert gqa._moe_dispatch_s(t) == 0.0


def test_quantised_experts_use_their_own_efficiency() -> None:
    """Compute-bound, 4-bit experts run at moe_quant_efficiency (0.25) against bf16's 0.5: 2x."""
    bf16 = PerfModel.build(MOE, TOY_GPU, efficiency=HALF)
    int4 = PerfModel.build(MOE, TOY_GPU, weight_dtype="int4", efficiency=HALF)
    t = np.array(1e6)
    assert int4._expert_compute_s(t) / bf16._expert_compute_s(t) == pytest.approx(2.0)


def test_published_dtypes_set_weight_bytes() -> None:
    """gpt-oss: experts 4.25 bits, the rest bf16; DeepSeek-V3 FP8 by default, bf16 on request."""
    oss = PerfModel.build(get_model("gpt-oss-120b"), get_gpu("h200"))
    p = oss.params
    expect = p.dense_body * 2 + p.routed_total * 4.25 / 8 + (p.embedding + p.lm_head) * 2
    assert oss.weight_bytes == pytest.approx(expect)
    assert oss.weight_bytes / 1e9 == pytest.approx(65.5, abs=1.0)  # published 60.8 GiB
    ds = PerfModel.build(get_model("deepseek-v3"), get_gpu("h200"))
    assert ds.weight_dtype == "fp8" and ds.expert_dtype == "fp8"
    assert (
        PerfModel.build(get_model("deepseek-v3"), get_gpu("h200"), weight_dtype="bf16").weight_dtype
        == "bf16"
    )


@pytest.mark.parametrize(
    "field", ["gemm_efficiency", "memory_efficiency", "decode_attention_efficiency"]
)
@pytest.mark.parametrize("value", [0.0, 1.5])
def test_efficiency_outside_unit_interval_is_a_config_error(field: str, value: float) -> None:
    """A fraction of peak outside (0, 1] would divide by zero or beat the roofline: refused."""
    bad = dataclasses.replace(HALF, **{field: value})
    with pytest.raises(ConfigError, match=rf"efficiency {field} must be in \(0, 1\], got {value}"):
        PerfModel.build(TOY, TOY_GPU, efficiency=bad)
    edge = PerfModel.build(TOY, TOY_GPU, efficiency=dataclasses.replace(HALF, **{field: 1.0}))
    assert getattr(edge.efficiency, field) == 1.0


def test_build_refuses_bad_options() -> None:
    """Unknown dtype, TP 0 and an EP that does not divide TP are user errors."""
    with pytest.raises(ConfigError, match="unknown weight dtype 'fp6'; choose one of bf16, "):
        toy(weight_dtype="fp6")
    with pytest.raises(ConfigError, match="--tp must be at least 1, got 0"):
        toy(tp=0)
    with pytest.raises(ConfigError, match=r"--ep must divide --tp \(4\), got 3"):
        toy(tp=4, ep=3)


def test_default_coefficients_per_gpu() -> None:
    """Each GPU gets its fitted entry, a listed sibling's or a borrowed one, said so.

    (The borrowing rule is tested in test_catalog_efficiency.py.)
    """
    h200, why = efficiency_for("h200")
    assert why == "fitted for h200" and "aiconfigurator" in h200.source
    h800, why = efficiency_for("h800")
    assert (
        "h100-sxm" in why and h800.gemm_efficiency == efficiency_for("h100-sxm")[0].gemm_efficiency
    )
    _, why = efficiency_for("mi300x")
    assert "mi300x has no fitted coefficients" in why
    pm = PerfModel.build(TOY, get_gpu("h200"))
    assert pm.efficiency_note == "fitted for h200"
