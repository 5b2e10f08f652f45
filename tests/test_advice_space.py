"""The search space and its analytic bounds, checked against hand arithmetic on the step table.

Shapes: which TP degrees of an instance fit a model (weights in 90% of GPU memory, the longest
request's KV in one replica's pool). Bounds: a request alone on an idle replica, and the least
busy time the trace's work takes, recomputed here from the step table's own formulas.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvadvisor.advice.slo import (
    DEEPSEEK_R1,
    LLAMA2_70B,
    LLAMA31_8B,
    loosened,
    mlperf_limit,
    round_up,
    slo_targets,
    slo_text,
)
from kvadvisor.advice.space import Work, batch_defaults, bounds, shapes
from kvadvisor.advice.tierfit import fit_tier
from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.instances import load_instances
from kvadvisor.catalog.models import get_model
from kvadvisor.catalog.storage import load_storage
from kvadvisor.errors import ConfigError
from kvadvisor.fleet import parse_slo
from kvadvisor.perfmodel import PerfModel

INSTANCES = load_instances()
STORAGE = load_storage()
LLAMA70 = get_model("llama-3.1-70b")


def test_tp_degrees_that_fit_and_why_the_others_do_not() -> None:
    """Llama-3.1-70B bf16 (141 GB of weights) on 8 x H200: TP 1 cannot hold the weights.

    0.9 x 151.4 GB = 136.3 GB usable per H200 (the GPU catalog's 141 GiB) < 141 GB of weights;
    TP 2 leaves 2 x 136.3 - 141 = 131.5 GB for KV: 131.5e9 / (2 x 160 KiB per rank per token)
    ... the shapes' pools come from the same memory-fit rule, and each holds the request.
    """
    got, refused = shapes(INSTANCES["p5en.48xlarge"], LLAMA70, "bf16", "bf16", 100_000)
    assert [s.tp for s in got] == [2, 4, 8]
    assert [s.replicas_per_instance for s in got] == [4, 2, 1]
    assert len(refused) == 1 and "TP 1" in refused[0] and "does not fit" in refused[0]
    gpu = get_gpu("h200")
    usable = 0.9 * gpu.memory_bytes
    # The weight bytes the performance model counts from the model's shapes (embeddings and
    # LM head included), about 141 GB in BF16.
    weights = PerfModel.build(LLAMA70, gpu, tp=2).weight_bytes
    assert weights == pytest.approx(LLAMA70.total_params * 2, rel=0.02)
    per_rank_token = 2 * LLAMA70.layers * LLAMA70.kv_heads * LLAMA70.head_dim * 2 / 2
    assert got[0].pool_tokens == pytest.approx(
        (2 * usable - weights) / 2 / per_rank_token, rel=1e-3
    )


def test_a_request_longer_than_the_pool_refuses_the_shape() -> None:
    """A100-40GB x 8 at TP 4: 4 x 36 GB - 141 GB = 3 GB of KV, about 12k tokens: refused.

    At TP 8 the pool is 8 x 36 - 141 = 147 GB, about 1.1M tokens: kept.
    """
    got, refused = shapes(INSTANCES["p4d.24xlarge"], LLAMA70, "bf16", "bf16", 126_527)
    assert [s.tp for s in got] == [8]
    assert any("TP 4" in r and "fewer than the longest request's 126,527" in r for r in refused)


def test_checkpoint_dtype_decides_the_fit() -> None:
    """DeepSeek-V3 in FP8 (671 GB) fits 8 x H200 (1,019 GB usable); in BF16 (1,342 GB) not."""
    model = get_model("deepseek-v3")
    fp8, _ = shapes(INSTANCES["p5en.48xlarge"], model, "bf16", "fp8", 10_000)
    bf16, refused = shapes(INSTANCES["p5en.48xlarge"], model, "bf16", "bf16", 10_000)
    assert [s.tp for s in fp8] == [8]
    assert bf16 == [] and all("does not fit" in r for r in refused)


def test_vllm_batch_defaults() -> None:
    """The vLLM API server's defaults: 8,192 / 1,024 on >= 70 GiB GPUs other than A100."""
    assert batch_defaults(get_gpu("h200")) == (8192, 1024)
    assert batch_defaults(get_gpu("a100-80gb")) == (2048, 256)
    assert batch_defaults(get_gpu("l4")) == (2048, 256)


def test_bounds_by_hand() -> None:
    """One request of 20,000 prompt tokens (8,000 cached) and 101 output tokens.

    Alone: 12,000 new tokens in step budgets of 8,192: one full chunk plus 3,808, each at the
    step table's token time, plus the attention pairs of 12,000 after 8,000 (layer-weighted)
    at the per-pair time. TPOT at batch 1: the token time of 1 plus the per-rank KV of the
    mean decode context (20,000 + 101 / 2) at the per-byte time. Busy time: prefill at whole
    budgets; decode at the largest batch the pool holds.
    """
    (shape, *_), _ = shapes(INSTANCES["p5en.48xlarge"], LLAMA70, "bf16", "bf16", 30_000)
    step = shape.step
    work = Work(np.array([20_000]), np.array([8_000]), np.array([101]), 100.0)
    b = bounds(shape, work, (99.0,))
    m, p = 12_000.0, 8_000.0
    pairs = step.full_attention_layers * (m * p + m * (m + 1) / 2)
    ttft = step.tokens_time_s(8192) + step.tokens_time_s(3808) + step.s_per_pair * pairs
    assert b.ttft_alone_s[99.0] == pytest.approx(float(ttft))
    ctx = 20_000 + 101 / 2
    tpot = (
        step.tokens_time_s(1.0)
        + step.decode_s_per_kv_byte * shape.kv.rank_layout.full_bytes_per_token * ctx
    )
    assert b.tpot_alone_s[99.0] == pytest.approx(float(tpot))
    prefill = m * float(step.tokens_time_s(8192)) / 8192 + step.s_per_pair * pairs
    assert b.prefill_replica_s == pytest.approx(prefill)
    batch = min(1024, shape.pool_tokens / ctx)
    decode = 101 * float(step.tokens_time_s(batch)) / batch + float(
        step.decode_s_per_kv_byte * 101 * shape.kv.rank_layout.full_bytes_per_token * ctx
    )
    assert b.decode_replica_s == pytest.approx(decode)
    # Fewest instances: (prefill + decode) / (100 s x 4 replicas), rounded up.
    need = math.ceil((prefill + decode) / 100.0 / 4)
    assert b.instances_needed(4, 100.0, "serving") == need


def test_mlperf_defaults_per_model() -> None:
    """The server-scenario limits of loadgen/mlperf.conf, at the 99th percentile."""
    assert mlperf_limit(LLAMA70)[0] == LLAMA2_70B
    assert (LLAMA2_70B.ttft_ms, LLAMA2_70B.tpot_ms) == (2000, 200)
    assert mlperf_limit(get_model("deepseek-v3"))[0] == DEEPSEEK_R1
    assert (DEEPSEEK_R1.ttft_ms, DEEPSEEK_R1.tpot_ms) == (2000, 80)
    assert mlperf_limit(get_model("qwen3-8b"))[0] == LLAMA31_8B  # nearest by size
    slo = slo_targets(None, LLAMA70)
    assert slo.targets == {"ttft_p99_s": 2.0, "tpot_p99_s": 0.2}
    assert "mlperf.conf" in slo.source and "99th percentile" in slo.source
    given = slo_targets("ttft_p90=1.5s,tpot_p99=50ms", LLAMA70)
    assert given.targets == {"ttft_p90_s": 1.5, "tpot_p99_s": 0.05}
    with pytest.raises(ConfigError, match="METRIC_pNN"):
        slo_targets("latency=2s", LLAMA70)


def test_default_follows_the_prompt_lengths() -> None:
    """Prompts longer than the benchmark's dataset get MLPerf's long-context TTFT (6 s).

    llama2-70b's limits were set on OpenOrca prompts cut at 1,024 tokens: a trace whose p99
    prompt is 1,024 keeps them; one token more gets llama3_1-405b's TTFT, 6,000 ms in
    loadgen/mlperf.conf, while TPOT keeps llama2-70b's 200 ms. A model whose benchmark is the
    long-context one (405B) is held to its own limits at any length.
    """
    assert slo_targets(None, LLAMA70, 1024.0).targets == {"ttft_p99_s": 2.0, "tpot_p99_s": 0.2}
    long = slo_targets(None, LLAMA70, 1025.0)
    assert long.targets == {"ttft_p99_s": 6.0, "tpot_p99_s": 0.2}
    assert "1,025 tokens" in long.source and "processorca.py" in long.source
    assert "llama3_1-405b.Server.ttft_latency = 6000 ms" in long.source
    assert long.rule == "MLPerf long-context TTFT: p99 prompt 1,025 > 1,024 tokens"
    # The Mooncake conversation trace's p99 prompt (85,400 tokens) is long.
    assert slo_targets(None, LLAMA70, 85400.0).targets["ttft_p99_s"] == 6.0
    # DeepSeek-R1's benchmark measured prompts up to MAX_ISL = 3,136 tokens; TPOT stays 80 ms.
    r1 = get_model("deepseek-r1")
    assert slo_targets(None, r1, 3136.0).targets == {"ttft_p99_s": 2.0, "tpot_p99_s": 0.08}
    assert slo_targets(None, r1, 3137.0).targets == {"ttft_p99_s": 6.0, "tpot_p99_s": 0.08}
    big = get_model("llama-3.1-405b")
    assert slo_targets(None, big, 85400.0).targets == {"ttft_p99_s": 6.0, "tpot_p99_s": 0.175}
    # --slo always wins.
    assert slo_targets("ttft_p99=2s", LLAMA70, 85400.0).targets == {"ttft_p99_s": 2.0}


def test_offered_targets_round_up_to_two_digits() -> None:
    """A closest miss's figures become --slo targets rounded up, never down."""
    assert round_up(2.32) == 2.4 and round_up(2.4) == 2.4 and round_up(0.157) == 0.16
    assert round_up(11.04) == 12.0 and round_up(0.0999) == 0.1
    got = loosened({"ttft_p99_s": 2.0, "tpot_p99_s": 0.2}, {"ttft_p99_s": 2.32, "tpot_p99_s": 0.15})
    assert got == {"ttft_p99_s": 2.4, "tpot_p99_s": 0.2}
    assert slo_text(got) == "ttft_p99=2.4s,tpot_p99=200ms"
    assert parse_slo(slo_text(got)) == got
    assert loosened({"ttft_p99_s": 2.0}, {"ttft_p99_s": math.inf}) is None


def test_essd_sized_for_bandwidth() -> None:
    """200 MB/s p99 at an 80% target needs 250 MB/s: PL1 size (250 - 120) / 0.5 = 260 GiB."""
    fit = fit_tier(
        STORAGE["alibaba-essd-pl1"],
        "prefill",
        INSTANCES["ecs.gn8v-8x.48xlarge"],
        2.0e8,
        None,
        100.0,
    )
    assert fit.capacity_gib == 260 and fit.devices == 1
    assert fit.write_bytes_per_s == pytest.approx(2.5e8)
    assert fit.feasible
    # Beyond one volume's 350 MB/s ceiling the tier stripes over several volumes.
    big = fit_tier(
        STORAGE["alibaba-essd-pl1"],
        "prefill",
        INSTANCES["ecs.gn8v-8x.48xlarge"],
        1.0e9,
        None,
        100.0,
    )
    assert big.devices == math.ceil(1.25e9 / 3.5e8)
