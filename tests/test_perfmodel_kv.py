"""KV bytes per token against the research catalog's figures; TP sharding, MLA, windows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvadvisor.catalog.models import get_model
from kvadvisor.errors import ConfigError
from kvadvisor.perfmodel.kv import KvLayout, kv_size, window_sum

# research/catalog.md section 4 and research/field.md 4.1 (bf16, all layers).
PUBLISHED_BF16 = {
    "qwen2.5-7b": 57_344,
    "qwen2.5-14b": 196_608,
    "qwen2.5-32b": 262_144,
    "qwen2.5-72b": 327_680,
    "qwen3-8b": 147_456,
    "qwen3-32b": 262_144,
    "qwen3-235b-a22b": 192_512,
    "llama-3.1-8b": 131_072,
    "llama-3.1-70b": 327_680,
    "llama-3.1-405b": 516_096,
    "deepseek-v3": 70_272,
    "deepseek-r1": 70_272,
    "mistral-7b": 131_072,
    "mixtral-8x7b": 131_072,
    "gpt-oss-120b": 73_728,
}


@pytest.mark.parametrize(("name", "expected"), sorted(PUBLISHED_BF16.items()))
def test_kv_bytes_per_token_bf16(name: str, expected: int) -> None:
    """Every catalog model reproduces the published bf16 figure (within-window for SWA)."""
    size = kv_size(get_model(name), "bf16", tp=1)
    assert size.total_bytes_per_token == expected
    assert size.layout.bytes_per_token == expected


def test_fp8_halves() -> None:
    """FP8 KV is one byte per element."""
    assert kv_size(get_model("llama-3.1-70b"), "fp8").total_bytes_per_token == 163_840


def test_tp_shards_gqa_heads() -> None:
    """Llama-3.1-70B (8 KV heads): TP 8 holds 1/8 per rank; the total stays 320 KiB."""
    size = kv_size(get_model("llama-3.1-70b"), "bf16", tp=8)
    assert size.per_rank_bytes_per_token == 40_960
    assert size.gpu_total_bytes_per_token == 327_680
    assert size.total_bytes_per_token == 327_680 and not size.replicated


def test_tp_beyond_kv_heads_replicates() -> None:
    """Qwen3-235B has 4 KV heads: at TP 8 each rank holds one head (ceil), replicated."""
    size = kv_size(get_model("qwen3-235b-a22b"), "bf16", tp=8)
    assert size.per_rank_bytes_per_token == 2 * 94 * 1 * 128 * 2
    assert size.gpu_total_bytes_per_token == 8 * 48_128
    assert size.total_bytes_per_token == 192_512 and size.replicated


def test_mla_is_not_sharded() -> None:
    """DeepSeek's latent is held whole by every rank (AIC memory.py; HiCache design doc)."""
    size = kv_size(get_model("deepseek-v3"), "bf16", tp=8)
    assert size.per_rank_bytes_per_token == 70_272
    assert size.gpu_total_bytes_per_token == 8 * 70_272
    assert size.total_bytes_per_token == 70_272


def test_sliding_window_caps() -> None:
    """gpt-oss-120b: 18 layers grow with context, 18 stop at 128 tokens."""
    layout = kv_size(get_model("gpt-oss-120b"), "bf16").layout
    per_layer = 2 * 8 * 64 * 2
    assert layout.bytes_for(100) == 100 * 36 * per_layer
    assert layout.bytes_for(10_000) == 10_000 * 18 * per_layer + 128 * 18 * per_layer
    mistral = kv_size(get_model("mistral-7b"), "bf16").layout
    assert mistral.bytes_for(100_000) == 4096 * 131_072


def test_bad_dtype_and_tp() -> None:
    """Unknown dtype and TP < 1 are user errors."""
    with pytest.raises(ConfigError, match="unknown KV dtype 'int3'"):
        kv_size(get_model("qwen3-8b"), "int3")
    with pytest.raises(ConfigError, match="--tp"):
        kv_size(get_model("qwen3-8b"), "bf16", tp=0)


@given(st.integers(0, 300), st.integers(0, 300), st.integers(1, 200))
def test_window_sum_matches_loop(first: int, count: int, window: int) -> None:
    """Closed form of sum_k min(first + k, W) equals the loop."""
    expected = sum(min(first + k, window) for k in range(count))
    assert window_sum(np.asarray(first), np.asarray(count), window) == expected


@given(st.integers(0, 500), st.integers(0, 300))
def test_bytes_summed_matches_loop(first: int, count: int) -> None:
    """KvLayout.bytes_summed equals summing bytes_for step by step."""
    layout = KvLayout(3.0, 5.0, 64)
    expected = sum(float(layout.bytes_for(first + k)) for k in range(count))
    got = float(layout.bytes_summed(np.asarray(first), np.asarray(count)))
    assert got == pytest.approx(expected)
