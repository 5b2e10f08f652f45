"""KV bytes per token from a model's shape: per rank and in total, TP, MLA, sliding windows."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvadvisor.catalog.models import ModelSpec
from kvadvisor.errors import ConfigError
from kvadvisor.units import BYTES_PER_BF16, BYTES_PER_FP8, BYTES_PER_FP16, BYTES_PER_FP32

BYTES_PER_INT8 = 1
BYTES_PER_INT4 = 0.5
# MXFP4 (OCP microscaling): 4-bit values plus one 8-bit scale per 32 (gpt-oss model card: 4.25
# bits per parameter).
BYTES_PER_MXFP4 = 4.25 / 8

KV_DTYPE_BYTES: dict[str, float] = {
    "bf16": BYTES_PER_BF16,
    "fp16": BYTES_PER_FP16,
    "fp8": BYTES_PER_FP8,
}
WEIGHT_DTYPE_BYTES: dict[str, float] = {
    "bf16": BYTES_PER_BF16,
    "fp16": BYTES_PER_FP16,
    "fp32": BYTES_PER_FP32,
    "fp8": BYTES_PER_FP8,
    "fp8-tensor": BYTES_PER_FP8,
    "int8": BYTES_PER_INT8,
    "int4": BYTES_PER_INT4,
    "fp4": BYTES_PER_INT4,
    "mxfp4": BYTES_PER_MXFP4,
}


def dtype_bytes(dtype: str, table: dict[str, float], what: str) -> float:
    """Bytes per element of ``dtype``; an unknown name is a user error listing the choices."""
    try:
        return table[dtype.lower()]
    except KeyError:
        raise ConfigError(
            f"unknown {what} dtype '{dtype}'; choose one of {', '.join(table)}"
        ) from None


@dataclass(frozen=True)
class KvLayout:
    """KV footprint as a function of context length.

    ``bytes_for(n) = full_bytes_per_token * n + windowed_bytes_per_token * min(n, window_tokens)``:
    full-attention layers grow with the context, sliding-window layers stop at the window.
    """

    full_bytes_per_token: float
    windowed_bytes_per_token: float = 0.0
    window_tokens: int | None = None

    @property
    def bytes_per_token(self) -> float:
        """Bytes per token while the context is within the window (all layers)."""
        return self.full_bytes_per_token + self.windowed_bytes_per_token

    def bytes_for(self, tokens: np.ndarray | float) -> np.ndarray:
        """KV bytes held for a context of ``tokens`` tokens (vectorised)."""
        n = np.asarray(tokens, dtype=np.float64)
        out = self.full_bytes_per_token * n
        if self.windowed_bytes_per_token and self.window_tokens is not None:
            out = out + self.windowed_bytes_per_token * np.minimum(n, self.window_tokens)
        return out

    def bytes_summed(self, first: np.ndarray, count: np.ndarray) -> np.ndarray:
        """``sum(bytes_for(first + k) for k in range(count))`` in closed form (vectorised).

        Used for decode: step k of a request reads the KV of ``first + k`` tokens.
        """
        a = np.asarray(first, dtype=np.float64)
        c = np.asarray(count, dtype=np.float64)
        linear = c * a + c * (c - 1) / 2.0
        out = self.full_bytes_per_token * linear
        if self.windowed_bytes_per_token and self.window_tokens is not None:
            out = out + self.windowed_bytes_per_token * window_sum(a, c, self.window_tokens)
        return out


def window_prefix(x: np.ndarray, window: float) -> np.ndarray:
    """``S(x) = sum_{t=1..x} min(t, W)`` in closed form (x >= 0, vectorised)."""
    x = np.asarray(x, dtype=np.float64)
    inside = np.minimum(x, window)
    return inside * (inside + 1) / 2.0 + np.maximum(x - window, 0.0) * window


def window_sum(first: np.ndarray, count: np.ndarray, window: float) -> np.ndarray:
    """``sum_{k=0..count-1} min(first + k, W)`` for first >= 0."""
    first = np.asarray(first, dtype=np.float64)
    count = np.asarray(count, dtype=np.float64)
    # sum_{t=first}^{first+count-1} min(t, W) = S(first+count-1) - S(first-1); S(-1) = S(0) = 0.
    hi = window_prefix(np.maximum(first + count - 1, 0.0), window)
    lo = window_prefix(np.maximum(first - 1, 0.0), window)
    return np.where(count > 0, hi - lo, 0.0)


@dataclass(frozen=True)
class KvSize:
    """KV bytes per token of one model at one dtype and tensor-parallel degree.

    ``per_rank``: what one GPU of the TP group holds per token. ``total``: the distinct KV of the
    model per token (what a storage tier keeps; MLA and replicated heads counted once).
    ``gpu_total``: summed over the TP ranks (GPU memory, replicas included).
    """

    per_rank_bytes_per_token: float
    total_bytes_per_token: float
    gpu_total_bytes_per_token: float
    layout: KvLayout  # distinct bytes (storage)
    rank_layout: KvLayout  # one rank's bytes (HBM reads in decode)
    tp: int
    dtype: str
    replicated: bool


def kv_size(model: ModelSpec, kv_dtype: str = "bf16", tp: int = 1) -> KvSize:
    """KV bytes per token by the DESIGN.md formulas.

    GQA/MHA: ``2 * layers * kv_heads * head_dim * dtype_bytes`` in total; per rank
    ``2 * layers * ceil(kv_heads / tp) * head_dim * dtype_bytes`` (heads are split across ranks,
    and replicated when ``kv_heads < tp``). MLA: ``layers * (kv_lora_rank + qk_rope_head_dim) *
    dtype_bytes``, not sharded by TP: every rank holds the whole latent (AIConfigurator
    ``sdk/memory.py::kv_bytes_per_token``; SGLang hicache_design.md). Sliding-window layers hold
    at most ``window`` tokens (KvLayout).
    """
    if tp < 1:
        raise ConfigError(f"--tp must be at least 1, got {tp}")
    b = dtype_bytes(kv_dtype, KV_DTYPE_BYTES, "KV")
    if model.is_mla:
        per_layer_total = (model.kv_lora_rank + model.qk_rope_head_dim) * b
        per_layer_rank = per_layer_total
        replicated = tp > 1
    else:
        per_layer_total = 2 * model.kv_heads * model.head_dim * b
        per_layer_rank = 2 * math.ceil(model.kv_heads / tp) * model.head_dim * b
        replicated = model.kv_heads < tp

    def layout(per_layer: float) -> KvLayout:
        return KvLayout(
            full_bytes_per_token=per_layer * model.full_attention_layers,
            windowed_bytes_per_token=per_layer * model.sliding_window_layers,
            window_tokens=model.sliding_window_tokens,
        )

    return KvSize(
        per_rank_bytes_per_token=per_layer_rank * model.layers,
        total_bytes_per_token=per_layer_total * model.layers,
        gpu_total_bytes_per_token=per_layer_rank * model.layers * tp,
        layout=layout(per_layer_total),
        rank_layout=layout(per_layer_rank),
        tp=tp,
        dtype=kv_dtype.lower(),
        replicated=replicated,
    )
