"""Memory fit: weights and KV against GPU memory; TP chosen by AIConfigurator's rule."""

from __future__ import annotations

import pytest

from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.models import get_model
from kvadvisor.perfmodel.memory import auto_tp, memory_fit
from kvadvisor.perfmodel.perf import PerfModel


def test_auto_tp() -> None:
    """TP x memory > 1.5 x weights: 70B bf16 (140 GB) needs 2 H200s or 4 H100s."""
    assert auto_tp(get_model("llama-3.1-70b"), get_gpu("h200")) == 2
    assert auto_tp(get_model("llama-3.1-70b"), get_gpu("h100-sxm")) == 4
    assert auto_tp(get_model("llama-3.1-8b"), get_gpu("h100-sxm")) == 1
    assert auto_tp(get_model("llama-3.1-70b"), get_gpu("h100-sxm"), "fp8") == 2
    assert auto_tp(get_model("llama-3.1-405b"), get_gpu("h100-sxm")) == 8  # does not fit: max


def test_memory_fit_by_hand() -> None:
    """Llama-3.1-8B on one H100 (80 GiB): 8.03B bf16 weights, 90 % usable, 128 KiB per token.

    Weights from config.json: 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336) body and
    2 x 128256 x 4096 embedding and head (norms left out).
    """
    pm = PerfModel.build(get_model("llama-3.1-8b"), get_gpu("h100-sxm"), tp=1)
    fit = memory_fit(pm, mean_context_tokens=4096)
    weights = 2 * (32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 2 * 128256 * 4096)
    assert pm.weight_bytes == weights
    budget = 0.9 * 80 * 1024**3 - weights
    assert fit.kv_budget_bytes_per_gpu == pytest.approx(budget)
    assert fit.kv_capacity_tokens == pytest.approx(budget / 131_072)
    assert fit.max_concurrent_requests == pytest.approx(budget / (4096 * 131_072))
    assert fit.weights_fit


def test_weights_that_do_not_fit() -> None:
    """405B on one H100 does not fit; nothing is left for KV."""
    pm = PerfModel.build(get_model("llama-3.1-405b"), get_gpu("h100-sxm"), tp=1)
    fit = memory_fit(pm, 1000)
    assert not fit.weights_fit and fit.kv_budget_bytes_per_gpu == 0.0
