"""A toy model, GPU and coefficients with round numbers, for hand-computed perfmodel tests."""

from __future__ import annotations

from kvadvisor.catalog.efficiency import AllReduceTable, Efficiency
from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.models import ModelSpec

# A toy dense model with round widths: hidden 32, MLP 64, 4 query / 2 KV heads of 8, vocab 100.
# Attention per layer 2*32*32 + 2*32*16 = 3,072; MLP 3*32*64 = 6,144; body 2 x 9,216 = 18,432;
# embedding and (untied) head 3,200 each.
TOY = ModelSpec(
    name="toy",
    display_name="toy",
    attention="gqa",
    layers=2,
    q_heads=4,
    kv_heads=2,
    head_dim=8,
    total_params=24_832,
    active_params=24_832,
    hidden_size=32,
    intermediate_size=64,
    vocab_size=100,
)
BODY = 18_432
HEAD = 3_200
# A toy GPU: 100 TFLOP/s bf16, 200 fp8, 1,000 GB/s, NVLink 100 GB/s both ways (50 one way).
TOY_GPU = GpuSpec(
    name="toy-gpu",
    display_name="toy",
    bf16_dense_tflops=100.0,
    fp8_dense_tflops=200.0,
    memory_gb=10.0,
    memory_bandwidth_gbps=1000.0,
    pcie_gbps=10.0,
    nvlink_gbps=100.0,
)
# A toy all-reduce table, measured over the toy GPU's 50 GB/s one-way link: 5-6 us for the
# smallest message, 64,000 bytes (1,000 toy tokens) in 10 / 20 / 40 us at TP 2 / 4 / 8.
TOY_ALLREDUCE = AllReduceTable(
    link_bytes_per_s=50e9,
    message_bytes=(64.0, 64_000.0, 640_000.0),
    tps=(2, 4, 8),
    times_us=((5.0, 10.0, 50.0), (5.0, 20.0, 100.0), (6.0, 40.0, 200.0)),
)


def ideal_allreduce(link_bytes_per_s: float = 50e9) -> AllReduceTable:
    """A ring all-reduce at the full link and no latency: ``2 (tp-1)/tp s / link``."""
    sizes = (1.0, 1e9)
    return AllReduceTable(
        link_bytes_per_s=link_bytes_per_s,
        message_bytes=sizes,
        tps=(2, 4, 8),
        times_us=tuple(
            tuple(2 * (tp - 1) / tp * s / link_bytes_per_s * 1e6 for s in sizes) for tp in (2, 4, 8)
        ),
    )


# Every fraction one half; p = 1 (compute and memory add); round overheads.
HALF = Efficiency(
    gemm_efficiency=0.5,
    gemm_fp8_efficiency=0.5,
    fp8_memory_efficiency=0.5,
    gemm_fp8_tensor_efficiency=0.5,
    fp8_tensor_memory_efficiency=0.5,
    moe_efficiency=0.5,
    moe_quant_efficiency=0.25,
    prefill_attention_efficiency=0.5,
    memory_efficiency=0.5,
    moe_memory_efficiency=0.5,
    decode_attention_efficiency=0.5,
    roofline_sharpness=1.0,
    gemm_sharpness=1.0,
    gemm_tile_tokens=0.0,
    moe_half_efficiency_width=0.0,
    expert_imbalance=0.0,
    expert_imbalance_exponent=0.5,
    attention_ns_per_token_head=1.0,
    layer_overhead_us=10.0,
    prefill_attention_layer_us=3.0,
    decode_attention_layer_us=2.0,
    moe_layer_overhead_us=20.0,
    moe_dispatch_ps_per_element=0.0,
    mla_layer_overhead_us=30.0,
    fp8_layer_overhead_us=40.0,
    fp8_tensor_layer_overhead_us=40.0,
    step_overhead_us=100.0,
    allreduce=TOY_ALLREDUCE,
    source="test",
)
PEAK = 100e12 * 0.5  # FLOP/s at half efficiency
BW = 1000e9 * 0.5  # bytes/s at half efficiency
