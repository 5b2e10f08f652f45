"""Step-time tables: sampled on grids, interpolated and extended, summed by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from perf_fixtures import HALF, TOY, TOY_GPU

from kvadvisor.perfmodel.perf import PerfModel
from kvadvisor.perfmodel.step import StepTable, interp_linear, roofline_step_table

WINDOWED = dataclasses.replace(TOY, sliding_window_tokens=4, sliding_window_layers=1)


def table_of(tokens_s: list[float], logits_s: list[float] | None = None) -> StepTable:
    """A hand-made table: tokens at 1, 2, 4; logits at 0, 1, 2."""
    extra = {}
    if logits_s is not None:
        extra = {"logits_grid": np.array([0.0, 1.0, 2.0]), "logits_s": np.array(logits_s)}
    return StepTable(
        source="test",
        tokens_grid=np.array([1.0, 2.0, 4.0]),
        tokens_s=np.array(tokens_s),
        s_per_pair=1e-9,
        decode_s_per_kv_byte=1e-12,
        full_attention_layers=2,
        **extra,
    )


def test_interpolation_and_linear_extension() -> None:
    """Between points: linear; past the last point: the last segment's slope goes on."""
    assert interp_linear(3.0, np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.0, 6.0])) == 4.0
    assert interp_linear(6.0, np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.0, 6.0])) == 10.0


def test_step_sums_four_parts_by_hand() -> None:
    """tokens(3) + logits(2) + 1e-9 x pairs + 1e-12 x KV bytes."""
    t = table_of([1.0, 2.0, 6.0], [0.0, 0.5, 0.7])
    got = t.step_s(3.0, 1e6, 2e9, 2.0)
    assert got == pytest.approx(4.0 + 0.7 + 1e-3 + 2e-3)


def test_attention_floors_only_in_steps_that_attend() -> None:
    """The prefill floor needs pairs, the decode floor KV bytes."""
    t = dataclasses.replace(
        table_of([1.0, 2.0, 6.0]), prefill_attention_fixed_s=0.25, decode_attention_fixed_s=0.5
    )
    assert t.step_s(1.0, 0.0, 0.0, 1.0) == pytest.approx(1.0)
    assert t.step_s(1.0, 1.0, 0.0, 1.0) == pytest.approx(1.0 + 1e-9 + 0.25)
    assert t.step_s(1.0, 0.0, 1.0, 1.0) == pytest.approx(1.0 + 1e-12 + 0.5)


def test_table_without_head_charges_none() -> None:
    """A table built without a head table (older callers) charges nothing for logits."""
    assert table_of([1.0, 2.0, 6.0]).logits_time_s(64.0) == 0.0


def test_roofline_table_matches_the_model_off_grid() -> None:
    """Interpolating the 8-per-doubling grid misses the exact token part by under 0.5 %."""
    pm = PerfModel.build(TOY, TOY_GPU, tp=2, efficiency=HALF)
    table = roofline_step_table(pm)
    assert table is pm.step_table
    t = np.array([3.0, 77.0, 1234.0, 54_321.0, 3e6])
    assert table.tokens_time_s(t) == pytest.approx(pm.tokens_s(t), rel=5e-3)
    assert table.logits_time_s(np.array([0.0, 5.0, 300.0])) == pytest.approx(
        pm.head_s(np.array([0.0, 5.0, 300.0])), rel=5e-3
    )


def test_attention_pairs_and_times_by_hand() -> None:
    """A chunk of 3 after 2 cached: 3x2 + 3x4/2 = 12 pairs per layer; each pair 2x4x(8+8) FLOPs."""
    table = PerfModel.build(TOY, TOY_GPU, efficiency=HALF).step_table
    assert table.attention_pairs(3.0, 2.0) == pytest.approx(2 * 12)
    assert table.s_per_pair == pytest.approx(2 * 4 * 16 / 5e13)
    assert table.decode_s_per_kv_byte == pytest.approx(1 / 5e11)


def test_windowed_layers_stop_counting_keys_at_the_window() -> None:
    """Window 4, one windowed layer: positions 3..5 attend to min(t, 4) = 3, 4, 4 keys."""
    table = PerfModel.build(WINDOWED, TOY_GPU, efficiency=HALF).step_table
    assert table.full_attention_layers == 1
    assert table.attention_pairs(3.0, 2.0) == pytest.approx(12 + (3 + 4 + 4))
