"""Step-time tables: the roofline sampled on a grid, checked against hand-computed step times."""

from __future__ import annotations

import numpy as np
import pytest

from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.perfmodel.efficiency import Efficiency
from kvadvisor.perfmodel.perf import PerfModel
from kvadvisor.perfmodel.step import roofline_step_table

# Round numbers so every expectation is computable by hand: 1e9 parameters, 100 TFLOP/s at
# half efficiency (50 TFLOP/s), 1000 GB/s at half efficiency (500 GB/s), bf16 weights (2 GB).
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
WINDOWED = ModelSpec(**{**TOY.__dict__, "sliding_window_tokens": 4, "sliding_window_layers": 1})
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


def test_token_part_is_the_roofline_max_of_flops_and_one_weight_read() -> None:
    """1 token: 2 GB of weights at 500 GB/s = 4 ms; 100k tokens: 2e14 FLOPs at 50 TFLOP/s = 4 s."""
    table = roofline_step_table(PerfModel.build(TOY, TOY_GPU, efficiency=HALF))
    assert table.tokens_time_s(1.0) == pytest.approx(4e-3)
    assert table.tokens_time_s(100_000.0) == pytest.approx(4.0, rel=1e-9)
    # The knee: 2e9 T / 5e13 = 4e-3 s at T = 100,000 / 1,000 = 100 tokens.
    assert table.tokens_time_s(100.0) == pytest.approx(4e-3, rel=1e-2)
    # Past the grid (1M tokens) the line goes on: 2e9 x 4M / 5e13 = 160 s.
    assert table.tokens_time_s(4_000_000.0) == pytest.approx(160.0, rel=1e-9)


def test_attention_pairs_and_times_by_hand() -> None:
    """A chunk of 3 after 2 cached: 3x2 + 3x4/2 = 12 pairs per layer; each pair 2x4x(8+8) FLOPs."""
    table = roofline_step_table(PerfModel.build(TOY, TOY_GPU, efficiency=HALF))
    assert table.attention_pairs(3.0, 2.0) == pytest.approx(2 * 12)
    assert table.s_per_pair == pytest.approx(2 * 4 * 16 / 5e13)
    # Decode: a rank reads KV at 500 GB/s.
    assert table.decode_s_per_kv_byte == pytest.approx(1 / 5e11)
    step = table.step_s(1000.0, 24.0, np.array([1e9]))
    assert step == pytest.approx(2e12 / 5e13 + 24 * 128 / 5e13 + 1e9 / 5e11)


def test_windowed_layers_stop_counting_keys_at_the_window() -> None:
    """Window 4, one windowed layer: positions 3..5 attend to min(t, 4) = 3, 4, 4 keys."""
    table = roofline_step_table(PerfModel.build(WINDOWED, TOY_GPU, efficiency=HALF))
    assert table.full_attention_layers == 1
    assert table.attention_pairs(3.0, 2.0) == pytest.approx(12 + (3 + 4 + 4))
