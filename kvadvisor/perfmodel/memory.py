"""Does it fit: weights plus the KV working set against GPU memory, and the TP degree to use."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.perfmodel.perf import PerfModel

# Share of GPU memory an engine may use: vLLM's default gpu_memory_utilization (0.9).
DEFAULT_MEMORY_UTILIZATION = 0.9
# AIConfigurator `generate`: pick TP so that TP x VRAM > 1.5 x weights (research/field.md 0.1).
AIC_WEIGHT_HEADROOM = 1.5
TP_CHOICES = (1, 2, 4, 8)


def auto_tp(model: ModelSpec, gpu: GpuSpec, weight_dtype: str | None = None) -> int:
    """Smallest TP in 1, 2, 4, 8 with ``TP x memory > 1.5 x weight bytes`` (else the largest).

    Only the degrees the model's attention heads split over (:meth:`ModelSpec.splits_over`).

    Weight bytes as :attr:`PerfModel.weight_bytes` counts them: the published dtypes (FP8
    DeepSeek-V3, MXFP4 gpt-oss experts) unless ``weight_dtype`` overrides them.
    """
    weights = PerfModel.build(model, gpu, weight_dtype=weight_dtype).weight_bytes
    # Only degrees the model's heads split over (Qwen2.5-7B's 28 heads refuse TP 8).
    choices = [tp for tp in TP_CHOICES if model.splits_over(tp)]
    for tp in choices:
        if tp * gpu.memory_bytes > AIC_WEIGHT_HEADROOM * weights:
            return tp
    return choices[-1]


@dataclass(frozen=True)
class MemoryFit:
    """Memory per GPU rank: weights, what is left for KV, and how much context that holds."""

    memory_bytes_per_gpu: float
    usable_bytes_per_gpu: float
    weight_bytes_per_gpu: float
    kv_budget_bytes_per_gpu: float
    weights_fit: bool
    kv_capacity_tokens: float  # while contexts are within any sliding window
    max_concurrent_requests: float  # at the mean context length given
    mean_context_tokens: float
    utilization: float


def memory_fit(
    pm: PerfModel, mean_context_tokens: float, utilization: float = DEFAULT_MEMORY_UTILIZATION
) -> MemoryFit:
    """Weights per rank against ``utilization`` x GPU memory; the rest holds KV.

    Activations and CUDA graphs are not modelled (they come out of the same headroom engines
    keep with their utilization cap).
    """
    mem = pm.gpu.memory_bytes
    usable = mem * utilization
    weights = pm.weight_bytes / pm.tp
    budget = max(usable - weights, 0.0)
    per_token = pm.kv.rank_layout.bytes_per_token
    per_request = float(pm.kv_rank_bytes(np.asarray(max(mean_context_tokens, 1.0))))
    return MemoryFit(
        memory_bytes_per_gpu=mem,
        usable_bytes_per_gpu=usable,
        weight_bytes_per_gpu=weights,
        kv_budget_bytes_per_gpu=budget,
        weights_fit=weights < usable,
        kv_capacity_tokens=budget / per_token if per_token else math.inf,
        max_concurrent_requests=budget / per_request if per_request else math.inf,
        mean_context_tokens=float(mean_context_tokens),
        utilization=utilization,
    )
