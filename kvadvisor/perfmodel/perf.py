"""Roofline stage model: prefill time (compute-bound), decode step time (memory-bound), vectorised.

Formulas (all times for one model instance of ``tp`` GPUs; every array argument is per request):

* Matmul FLOPs per token ``2 * P_active`` (the "2N" forward-pass rule, Kaplan et al. 2020, also
  AIConfigurator's GEMM ops); attention FLOPs per (query, key) pair per layer
  ``2 * q_heads * (d_qk + d_v)`` (QK^T and AV products).
* Prefill of ``m`` new tokens after ``p`` cached ones: each new token at position ``t`` attends to
  ``t`` keys (causal), ``min(t, W)`` on sliding-window layers; FLOPs over
  ``tp * peak * prefill_mfu``, and never faster than reading the weights once (roofline ``max``).
* Decode step of a batch of ``B`` requests: weight bytes (MoE: the experts the batch touches)
  plus each request's KV, read from memory at ``bandwidth * memory_eff`` per rank; never faster
  than its FLOPs at ``decode_mfu`` (roofline ``max``).
* MoE experts touched by ``B`` tokens routing to ``k`` of ``E`` experts each, uniform routing:
  ``E * (1 - (1 - k/E)^B)`` (expected distinct experts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.errors import ConfigError
from kvadvisor.perfmodel.efficiency import Efficiency, default_efficiency
from kvadvisor.perfmodel.kv import WEIGHT_DTYPE_BYTES, KvSize, dtype_bytes, kv_size, window_prefix


@dataclass(frozen=True)
class PerfModel:
    """One model served on one GPU type with tensor parallelism ``tp``."""

    model: ModelSpec
    gpu: GpuSpec
    tp: int
    kv_dtype: str
    weight_dtype: str
    efficiency: Efficiency
    kv: KvSize

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        model: ModelSpec,
        gpu: GpuSpec,
        *,
        tp: int = 1,
        kv_dtype: str = "bf16",
        weight_dtype: str = "bf16",
        efficiency: Efficiency | None = None,
    ) -> PerfModel:
        """Check the options and precompute the KV size."""
        dtype_bytes(weight_dtype, WEIGHT_DTYPE_BYTES, "weight")
        if tp < 1:
            raise ConfigError(f"--tp must be at least 1, got {tp}")
        eff = efficiency or default_efficiency(gpu.name)
        for name in ("prefill_mfu", "decode_mfu", "memory"):
            value = getattr(eff, name)
            if not 0 < value <= 1:
                raise ConfigError(f"efficiency {name} must be in (0, 1], got {value}")
        return cls(
            model,
            gpu,
            tp,
            kv_dtype.lower(),
            weight_dtype.lower(),
            eff,
            kv_size(model, kv_dtype, tp),
        )

    def with_efficiency(self, efficiency: Efficiency) -> PerfModel:
        """The same deployment with other efficiency factors."""
        return PerfModel.build(
            self.model,
            self.gpu,
            tp=self.tp,
            kv_dtype=self.kv_dtype,
            weight_dtype=self.weight_dtype,
            efficiency=efficiency,
        )

    # ---- constants ------------------------------------------------------------------------
    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per weight."""
        return WEIGHT_DTYPE_BYTES[self.weight_dtype]

    @property
    def weight_bytes(self) -> float:
        """All weights, bytes, over the whole TP group."""
        return self.model.total_params * self.weight_bytes_per_param

    @property
    def peak_flops(self) -> float:
        """Dense FLOP/s of one GPU for the weight dtype (FP8 weights use FP8 tensor cores)."""
        return self.gpu.peak_flops("fp8" if self.weight_dtype in ("fp8", "fp4", "int4") else "bf16")

    @property
    def flops_per_token(self) -> float:
        """Matmul FLOPs per token: 2 x active parameters."""
        return 2.0 * self.model.active_params

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs per (query, key) pair per layer: 2 x q_heads x (d_qk + d_v)."""
        m = self.model
        return 2.0 * m.q_heads * (m.qk_dim + m.v_dim)

    def _bandwidth(self) -> float:
        return self.gpu.memory_bandwidth_bytes_per_s * self.efficiency.memory

    # ---- weights read per forward pass ----------------------------------------------------
    def weight_bytes_read(self, tokens: np.ndarray | float) -> np.ndarray:
        """Weight bytes one forward pass over ``tokens`` tokens reads (whole TP group).

        Dense: all weights. MoE: shared part plus the routed experts the tokens touch,
        ``R * (1 - (1 - k/E)^tokens)`` with ``R`` the routed-expert parameters, derived from
        ``P_total - P_active = R * (1 - k/E)``.
        """
        m = self.model
        if not m.is_moe or m.experts_per_token <= 0 or m.experts_per_token >= m.experts:
            return np.float64(self.weight_bytes)  # broadcasts against any shape
        x = np.maximum(np.asarray(tokens, dtype=np.float64), 1.0)
        frac = m.experts_per_token / m.experts
        routed = (m.total_params - m.active_params) / (1.0 - frac)
        shared = max(m.active_params - routed * frac, 0.0)
        touched = 1.0 - np.power(1.0 - frac, x)
        return (shared + routed * touched) * self.weight_bytes_per_param

    # ---- prefill ----------------------------------------------------------------------------
    def attention_pairs(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Layer-weighted (query, key) pairs of a prefill: sum over layers of attended keys."""
        m_tok = np.asarray(new_tokens, dtype=np.float64)
        p = np.asarray(cached_tokens, dtype=np.float64)
        full = m_tok * p + m_tok * (m_tok + 1) / 2.0
        pairs = self.model.full_attention_layers * full
        if self.model.sliding_window_layers:
            w = float(self.model.sliding_window_tokens or 0)
            win = window_prefix(p + m_tok, w) - window_prefix(p, w)
            pairs = pairs + self.model.sliding_window_layers * win
        return pairs

    def prefill_flops(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """FLOPs to prefill ``new_tokens`` after ``cached_tokens`` already in the KV cache."""
        m_tok = np.asarray(new_tokens, dtype=np.float64)
        return self.flops_per_token * m_tok + self.attention_flops_per_pair * self.attention_pairs(
            m_tok, cached_tokens
        )

    def prefill_compute_s(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Compute-bound prefill time, s: FLOPs / (tp x peak x prefill_mfu)."""
        denom = self.tp * self.peak_flops * self.efficiency.prefill_mfu
        return self.prefill_flops(new_tokens, cached_tokens) / denom

    def prefill_s(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Prefill latency, s: roofline max of compute and one read of the weights it touches."""
        compute = self.prefill_compute_s(new_tokens, cached_tokens)
        weights = self.weight_bytes_read(new_tokens) / (self.tp * self._bandwidth())
        return np.maximum(compute, weights)

    # ---- decode -----------------------------------------------------------------------------
    def decode_step_s(self, batch: np.ndarray, batch_kv_rank_bytes: np.ndarray) -> np.ndarray:
        """Latency of one decode step, s, for a running batch.

        ``batch``: requests in the step; ``batch_kv_rank_bytes``: KV one rank reads for all of
        them. Memory: (weights touched / tp + KV per rank) / (bandwidth x memory_eff); compute:
        (2 P_active B + attention) / (tp x peak x decode_mfu), with the attended keys recovered
        from the KV bytes (bytes per rank are proportional to keys, layer by layer); the step
        takes the larger.
        """
        b = np.maximum(np.asarray(batch, dtype=np.float64), 1.0)
        kv = np.asarray(batch_kv_rank_bytes, dtype=np.float64)
        mem = (self.weight_bytes_read(b) / self.tp + kv) / self._bandwidth()
        attended = kv / (self.kv.rank_layout.bytes_per_token or 1.0)
        attention = self.attention_flops_per_pair * self.model.layers * attended
        flops = self.flops_per_token * b + attention
        comp = flops / (self.tp * self.peak_flops * self.efficiency.decode_mfu)
        return np.maximum(mem, comp)

    def decode_gpu_s(
        self, input_tokens: np.ndarray, steps: np.ndarray, harmonic_batch: np.ndarray
    ) -> np.ndarray:
        """GPU time charged to each request's decode, s (batch-aware).

        A step serves the whole batch, so a request pays ``1/B`` of the weight read and all of
        its own KV read: ``steps x W(B)/(B tp bw) + sum_k KV_rank(n + k) / bw``, against the
        compute side ``(steps x 2 P_active + attention) / (tp peak decode_mfu)``; the larger wins.
        ``B`` is the harmonic mean batch over the request's decode (``1/B`` is what adds up).
        """
        steps = np.asarray(steps, dtype=np.float64)
        b = np.maximum(np.asarray(harmonic_batch, dtype=np.float64), 1.0)
        first = np.asarray(input_tokens, dtype=np.float64) + 1.0
        own_kv = self.kv.rank_layout.bytes_summed(first, steps)
        mem = (steps * self.weight_bytes_read(b) / (b * self.tp) + own_kv) / self._bandwidth()
        attended = own_kv / (self.kv.rank_layout.bytes_per_token or 1.0)
        attention = self.attention_flops_per_pair * self.model.layers * attended
        flops = steps * self.flops_per_token + attention
        comp = flops / (self.tp * self.peak_flops * self.efficiency.decode_mfu)
        return np.maximum(mem, comp)

    def kv_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """Distinct KV bytes (what a storage tier holds) for contexts of ``tokens`` tokens."""
        return self.kv.layout.bytes_for(tokens)

    def kv_rank_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """KV bytes one rank holds (and reads per decode step) for ``tokens`` tokens."""
        return self.kv.rank_layout.bytes_for(tokens)
