"""No step time beats physics: FLOPs over peak and bytes over HBM bandwidth, swept wide.

Every catalog model on every catalog GPU, at TP 1/2/4/8 (MoE experts split by TP and by
expert parallelism), in its published dtype and as bf16, block and per-tensor FP8 and 4-bit
weights, with bf16 and FP8 KV. The bounds use only the GPU catalog's peaks (no fitted
efficiency) and the weights a step must read at least once:

* prefill of ``n`` tokens alone: ``2 x active matmul params x n`` FLOPs plus the LM head for
  its one logit (attention excluded, so the bound is loose there) over ``tp x peak``, and the
  dense weights and one token's top-k experts read once, over ``tp x HBM bandwidth``;
* decode step of ``B`` sequences: the FLOPs of ``B`` tokens and ``B`` logits, and those
  weights plus the KV it reads over the bandwidth.

``peak`` is the FP8 dense peak for FP8 weights on a GPU with FP8 units, else the bf16 one (the
fastest units the weights can use).
"""

from __future__ import annotations

import numpy as np
import pytest

from kvadvisor.catalog.gpus import load_gpus
from kvadvisor.catalog.models import load_models
from kvadvisor.errors import ConfigError
from kvadvisor.perfmodel.kv import WEIGHT_DTYPE_BYTES
from kvadvisor.perfmodel.perf import FP8_DTYPES, PerfModel

WEIGHT_DTYPES = (None, "bf16", "fp8", "fp8-tensor", "int4")
KV_DTYPES = ("bf16", "fp8")
TPS = (1, 2, 4, 8)
PREFILL_TOKENS = np.array([1.0, 512.0, 8192.0, 65536.0])
DECODE = ((1.0, 1024.0), (64.0, 4096.0), (1024.0, 32768.0))


def _bounds(pm: PerfModel, tokens: np.ndarray, logits: np.ndarray) -> tuple[np.ndarray, float]:
    """(FLOPs bound for ``tokens`` tokens and ``logits`` logits, s; weight-read bound, s)."""
    p, gpu = pm.params, pm.gpu
    fp8 = pm.weight_dtype in FP8_DTYPES and gpu.fp8_dense_tflops is not None
    peak = gpu.peak_flops("fp8" if fp8 else "bf16")
    flops = 2.0 * p.body_active * tokens + 2.0 * p.lm_head * logits
    weights = p.dense_body * WEIGHT_DTYPE_BYTES[pm.weight_dtype]
    weights += p.routed_active * WEIGHT_DTYPE_BYTES[pm.expert_dtype]  # one token's experts
    bandwidth = gpu.memory_bandwidth_bytes_per_s
    return flops / (pm.tp * peak), weights / (pm.tp * bandwidth)


def _deployments():
    """Every (model, GPU, TP, EP, weight dtype, KV dtype) the model accepts."""
    for model in load_models().values():
        for gpu in load_gpus().values():
            for tp in TPS:
                for ep in sorted({1, tp}) if model.is_moe else (1,):
                    for i, wd in enumerate(WEIGHT_DTYPES):
                        kv = KV_DTYPES[(i + tp) % 2]  # both KV dtypes, alternating
                        try:
                            yield PerfModel.build(
                                model, gpu, tp=tp, ep=ep, kv_dtype=kv, weight_dtype=wd
                            )
                        except ConfigError:
                            continue  # e.g. a TP degree the model's heads do not split into


def test_no_step_is_faster_than_its_physical_bound() -> None:
    """Prefill and decode steps take at least their FLOPs over peak and bytes over bandwidth."""
    checked = 0
    for pm in _deployments():
        flops_s, weights_s = _bounds(pm, PREFILL_TOKENS, np.ones_like(PREFILL_TOKENS))
        prefill = pm.prefill_s(PREFILL_TOKENS, np.zeros_like(PREFILL_TOKENS))
        floor = np.maximum(flops_s, weights_s)
        label = f"{pm.model.name} {pm.gpu.name} tp{pm.tp} ep{pm.ep} {pm.weight_dtype}/{pm.kv_dtype}"
        assert np.all(prefill >= floor), (label, prefill / floor)
        for batch, ctx in DECODE:
            kv = batch * float(pm.kv_rank_bytes(np.asarray(ctx + 1.0)))
            step = float(pm.decode_step_s(np.asarray(batch), np.asarray(kv)))
            flops_s, weights_s = _bounds(pm, np.asarray(batch), np.asarray(batch))
            memory_s = weights_s + kv / pm.gpu.memory_bandwidth_bytes_per_s
            assert step >= max(float(flops_s), memory_s), (label, batch, ctx, step, memory_s)
        checked += 1
    # All models x GPUs x TPs x dtypes less the TP degrees some models do not split into.
    assert checked > 0.5 * len(load_models()) * len(load_gpus()) * len(TPS) * len(WEIGHT_DTYPES)


@pytest.mark.parametrize(
    ("gpu", "dtype", "tps"),
    [
        *[(g, "fp8-tensor", (1, 2, 8)) for g in ("h100-sxm", "h200", "b200", "l40s")],
        *[(g, "fp8", (1, 2, 8)) for g in ("h100-sxm", "h200")],
        *[(g, "fp8", (1,)) for g in ("b200", "l40s")],
    ],
)
def test_fp8_prefill_is_not_slower_than_bf16_on_fp8_units(
    gpu: str, dtype: str, tps: tuple[int, ...]
) -> None:
    """Prefill of 8k tokens with FP8 weights beats BF16 wherever the GPU has FP8 units.

    Except where AIC's vLLM silicon data says otherwise: block-scaled FP8 GEMMs with about 1k
    tokens per GPU (8k at TP 8) on B200 (Qwen3-32B: 54.7 ms against 40.0 ms in bf16 at 1,024
    tokens) and L40S, and small-batch decode (H200: 18.5 ms against 16.4 ms per step).
    """
    from kvadvisor.catalog.gpus import get_gpu
    from kvadvisor.catalog.models import get_model

    for model in ("qwen3-32b", "llama-3.1-8b", "llama-3.1-70b"):
        for tp in tps:
            fp8 = PerfModel.build(get_model(model), get_gpu(gpu), tp=tp, weight_dtype=dtype)
            bf16 = PerfModel.build(get_model(model), get_gpu(gpu), tp=tp, weight_dtype="bf16")
            n = np.asarray(8192.0)
            assert float(fp8.prefill_s(n, 0.0)) < float(bf16.prefill_s(n, 0.0)), (model, tp)
