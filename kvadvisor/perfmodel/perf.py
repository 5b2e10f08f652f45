"""Step-time model: a roofline calibrated per GPU, from which prefill and decode times follow.

One engine step of a model replica (``tp`` GPUs; the routed experts spread over ``ep`` of
them) that holds ``T`` tokens (prefill chunk tokens plus one per decoding sequence), ``L``
sequences whose logits it computes, ``P`` layer-weighted prefill attention pairs and ``K`` KV
bytes per rank read by its decoding sequences takes (docs/stage-profiler.md has each term with
its source):

    step(T, L, P, K) = fixed + gemm(T) + experts(T) + dispatch(T) + elementwise(T) + allreduce(T)
                     + attention_tokens(T) + head(L) + s_pair P + s_kv K
                     + [P > 0] prefill_attention_fixed + [K > 0] decode_attention_fixed

* ``fixed``: ``step_overhead + layers x layer_overhead`` plus ``moe_layer_overhead`` per MoE
  layer (router, top-k, token permutation kernels) and ``mla_layer_overhead`` per MLA layer
  (its extra projections and norms) and a quarter of ``fp8_layer_overhead`` per FP8 GEMM
  (attention's qkv and o in every layer but MLA ones, a dense MLP's gate-up and down)
  (activation quantisation and scale set-up; block-scaled and per-tensor FP8 each have their
  own): launch floors and scheduling.
* ``gemm``: the dense matmuls (attention projections, dense MLPs, shared experts, router) as a
  soft roofline ``(t_c^p + t_m^p)^(1/p)`` (``p`` = ``gemm_sharpness``) of compute
  ``2 T' W / (tp F eta_gemm)`` and weight read ``W w / (tp BW eta_mem)``, where
  ``T' = T / (1 - exp(-T/m0))`` is at least about ``m0`` = ``gemm_tile_tokens`` rows
  (part-empty row tiles: a small GEMM costs ``m0`` rows of compute, so the weight read can
  overlap a compute-bound prefill instead of adding to it); FP8 weights (on GPUs with FP8
  units) use the FP8 peak and the compute and weight-read fractions fitted for their scaling
  (block or per-tensor).
* ``experts``: per MoE layer the busiest expert-parallel rank, which gets ``T k / ep`` expert
  tokens times ``1 + x log2(ep) / (E/ep)^a`` and reads the experts they touch,
  ``E/ep (1 - (1 - k/E)^(T imb))`` of its ``E/ep``, at least ``max(n/ep, min(n, 1))`` of the
  ``n = E (1 - (1 - k/E)^T)`` the step touches (its slowest rank's share, and one expert
  once a token is routed); soft roofline (``p`` =
  ``roofline_sharpness``) of compute at ``eta_moe`` and weight read at ``eta_moe_mem``;
  ``eta_moe`` (16-bit experts; quantised ones have their own) falls for narrow experts, times
  ``w / (w + w_half)`` with ``w`` the expert width per rank. A shared expert runs beside the
  routed ones: with FP8 weights a layer takes at least its two GEMMs' FP8 floors.
* ``dispatch``: per MoE layer of an MLA model at ``tp > 1`` the collectives around the experts
  (dispatch and combine), ``moe_dispatch x T h`` (GQA MoE models' are the layer's all-reduces).
* ``elementwise``: two residual-add + RMSNorm passes (4 hidden vectors each) and the gated
  activation (reads 2, writes 1 vector of the MLP width per rank) per layer and token, at
  ``BW eta_mem``.
* ``allreduce``: two per layer when ``tp > 1`` (after attention and after the MLP, as
  Megatron-style tensor parallelism does) and one after the vocabulary-parallel embedding, each
  of ``T h`` 16-bit activations per GPU, timed by the GPU's measured all-reduce table
  (``AllReduceTable``: time by message size at TP 2, 4 and 8, as AIConfigurator reads its
  vLLM custom all-reduce measurements), rescaled to the GPU's own link (NVLink, PCIe where
  there is none) when the table was measured on another.
* ``attention_tokens``: the attention kernels' per-query cost (tile set-up, softmax rescaling),
  ``a_tok T (h_q/tp) layers``.
* ``head``: the LM head only for the ``L`` sequences that produce logits, never the embedding
  lookup; soft roofline (the dense GEMMs' ``p``, no tile floor) of ``2 L V h / tp`` FLOPs and
  ``V h`` 16-bit weights per rank.
* ``s_pair``: prefill attention FLOPs ``2 (h_q/tp)(d_qk + d_v)`` per pair at
  ``F_bf16 eta_attn``.
* ``s_kv``: decode attention per KV byte a rank reads, ``max(1 / (BW eta_kv), FLOPs per byte /
  (F_bf16 eta_attn))`` (the FLOPs side binds only for MLA at low TP).
* ``prefill_attention_fixed`` / ``decode_attention_fixed``: the attention kernels' floor per
  layer (launch, scheduling metadata, split-KV reduction), paid once per step by a step that
  holds prefill chunks / decode tokens.

All ``T``-terms are sampled once on a grid into a :class:`StepTable` (the replay reads the
table); :meth:`PerfModel.prefill_s` and :meth:`PerfModel.decode_step_s` evaluate the same table
for a lone prefill or a decode batch, so the open-loop profiler and the replay share one model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from kvadvisor.catalog.efficiency import Efficiency
from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.models import ModelSpec, ParamBreakdown
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.errors import ConfigError
from kvadvisor.perfmodel.kv import WEIGHT_DTYPE_BYTES, KvSize, dtype_bytes, kv_size
from kvadvisor.perfmodel.step import StepTable
from kvadvisor.units import BYTES_PER_BF16, BYTES_PER_GB

NS_PER_S = 1e9
US_PER_S = 1e6
# Tokens-in-step grid: 1 to 1M tokens, 8 points per doubling. Linear interpolation between
# points of a soft roofline misses the exact curve by under 0.5 %.
TOKENS_GRID = np.unique(np.round(np.logspace(0, 20, 161, base=2.0)))
# Logit-producing sequences per step: 0 to 16,384 (8 points per doubling above 1).
LOGITS_GRID = np.concatenate([[0.0], np.unique(np.round(np.logspace(0, 14, 113, base=2.0)))])
# Two residual-add + RMSNorm passes per layer, each reading the input and the residual and
# writing both: 8 hidden vectors per token and layer.
NORM_VECTORS_PER_LAYER = 8
# A gated activation reads the gate and up projections and writes their product.
ACTIVATION_VECTORS = 3
# Megatron-style tensor parallelism all-reduces twice per layer (after attention, after the MLP),
# and vLLM's VocabParallelEmbedding once more after the embedding lookup.
ALLREDUCES_PER_LAYER = 2
EMBEDDING_ALLREDUCES = 1
# Activations, the LM head and the embedding stay 16-bit in FP8 and 4-bit checkpoints alike.
ACTIVATION_BYTES = BYTES_PER_BF16
# FP8 weights run on FP8 tensor cores where the GPU has them, each scaling scheme with its own
# kernels and so its own fitted coefficients: "fp8" block-scaled (128 x 128 tiles, how
# DeepSeek, Qwen and Kimi publish FP8 checkpoints; vLLM's w8a8 block-FP8 GEMM) and
# "fp8-tensor" one scale per tensor (vLLM's --quantization fp8, FP8-Dynamic checkpoints).
# Without FP8 units (A100, L4-class before Ada have none) they are read as 8-bit and
# dequantised into bf16 matmuls (vLLM's FP8 Marlin kernel).
FP8_DTYPES = ("fp8", "fp8-tensor")
# GEMMs of a layer with FP8 weights: attention's projections (fused qkv, o) and a gated MLP's
# (fused gate-up, down), a dense layer's or a shared expert's.
GEMMS_PER_PROJECTION_SET = 2
GEMMS_PER_MLP = 2


def tile_tokens(tokens: np.ndarray, m0: float) -> np.ndarray:
    """Rows a GEMM of ``tokens`` rows costs: ``T / (1 - exp(-T/m0))``, at least about ``m0``.

    A GEMM's row tiles run part-empty below ``m0`` rows (the kernel's tile height times its
    waves), so a short one costs about ``m0`` rows of compute and a long one its own; the knee
    is sharper than a rate ``T/(T + m0)``, which would also tax a compute-bound 1k-token prefill.
    """
    t = np.asarray(tokens, dtype=np.float64)
    if m0 <= 0.0:
        return t
    x = np.maximum(t / m0, 1e-12)
    return t / -np.expm1(-x)


def soft_roofline(compute_s: np.ndarray, memory_s: np.ndarray, p: float) -> np.ndarray:
    """``(t_c^p + t_m^p)^(1/p)``: the roofline ``max`` with a rounded knee (p -> inf is max)."""
    c = np.asarray(compute_s, dtype=np.float64)
    m = np.asarray(memory_s, dtype=np.float64)
    top = np.maximum(np.maximum(c, m), 1e-300)
    return top * np.power(np.power(c / top, p) + np.power(m / top, p), 1.0 / p)


@dataclass(frozen=True)
class PerfModel:
    """One model served on one GPU type: ``tp`` GPUs per replica, experts over ``ep`` of them.

    ``weight_dtype`` is the dense layers' dtype and ``expert_dtype`` the routed experts' (both
    default to the checkpoint's published dtypes). ``efficiency_note`` says where the
    coefficients come from (the report prints it).
    """

    model: ModelSpec
    gpu: GpuSpec
    tp: int
    kv_dtype: str
    weight_dtype: str
    efficiency: Efficiency
    kv: KvSize
    ep: int = 1
    expert_dtype: str = "bf16"
    efficiency_note: str = ""
    table_override: StepTable | None = None

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        model: ModelSpec,
        gpu: GpuSpec,
        *,
        tp: int = 1,
        ep: int = 1,
        kv_dtype: str = "bf16",
        weight_dtype: str | None = None,
        efficiency: Efficiency | None = None,
        catalogs: PerfCatalogs | None = None,
    ) -> PerfModel:
        """Check the options, pick the GPU's coefficients and precompute the KV size.

        ``weight_dtype`` overrides the checkpoint's dtypes for every weight (None: published).
        ``efficiency`` None: the GPU's coefficients from ``catalogs`` (the packaged ones by
        default): its own entry or a borrowed one, said so in ``efficiency_note``.
        """
        if tp < 1:
            raise ConfigError(f"--tp must be at least 1, got {tp}")
        if ep < 1 or tp % ep:
            raise ConfigError(f"--ep must divide --tp ({tp}), got {ep}")
        dense = (weight_dtype or model.weight_dtype).lower()
        experts = (weight_dtype or model.experts_dtype).lower()
        dtype_bytes(dense, WEIGHT_DTYPE_BYTES, "weight")
        dtype_bytes(experts, WEIGHT_DTYPE_BYTES, "weight")
        note = "given"
        if efficiency is None:
            efficiency, note = (catalogs or PerfCatalogs.packaged()).efficiency_for(gpu)
        for name, value in efficiency.as_dict().items():
            if name.endswith("_efficiency") and not 0 < value <= 1:
                raise ConfigError(f"efficiency {name} must be in (0, 1], got {value}")
        return cls(
            model,
            gpu,
            tp,
            kv_dtype.lower(),
            dense,
            efficiency,
            kv_size(model, kv_dtype, tp),
            ep,
            experts,
            note,
        )

    def with_efficiency(self, efficiency: Efficiency) -> PerfModel:
        """The same deployment on the calibrated roofline with other coefficients."""
        return replace(
            self, efficiency=efficiency, efficiency_note=efficiency.source, table_override=None
        )

    def with_step_table(self, table: StepTable) -> PerfModel:
        """The same deployment with its step times from ``table`` (the silicon estimator)."""
        return replace(self, table_override=table)

    # ---- constants ------------------------------------------------------------------------
    @property
    def params(self) -> ParamBreakdown:
        """The model's parameters by role."""
        return self.model.params

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per dense weight."""
        return WEIGHT_DTYPE_BYTES[self.weight_dtype]

    @property
    def expert_bytes_per_param(self) -> float:
        """Bytes per routed-expert weight."""
        return WEIGHT_DTYPE_BYTES[self.expert_dtype]

    @property
    def _table_bytes_per_param(self) -> float:
        """Embedding and LM head bytes per weight: 16-bit unless the whole model is wider."""
        return max(self.weight_bytes_per_param, BYTES_PER_BF16)

    @property
    def weight_bytes(self) -> float:
        """All weights, bytes, over the whole TP group (each role at its dtype)."""
        p = self.params
        if not p.from_shapes:
            return (
                p.dense_body * self.weight_bytes_per_param
                + p.routed_total * self.expert_bytes_per_param
            )
        tables = p.embedding + (0.0 if p.tied else p.lm_head)
        return (
            p.dense_body * self.weight_bytes_per_param
            + p.routed_total * self.expert_bytes_per_param
            + tables * self._table_bytes_per_param
        )

    def _fp8_units(self, dtype: str) -> bool:
        """Whether weights of ``dtype`` run on the GPU's FP8 tensor cores."""
        return dtype in FP8_DTYPES and self.gpu.fp8_dense_tflops is not None

    def _peak(self, dtype: str) -> tuple[float, float]:
        """(peak FLOP/s, efficiency) of matmuls on weights of ``dtype``."""
        eff = self.efficiency
        if self._fp8_units(dtype):
            if dtype == "fp8-tensor":
                return self.gpu.peak_flops("fp8"), eff.gemm_fp8_tensor_efficiency
            return self.gpu.peak_flops("fp8"), eff.gemm_fp8_efficiency
        return self.gpu.peak_flops("bf16"), eff.gemm_efficiency

    @property
    def _bandwidth(self) -> float:
        """Weight-read bandwidth of one GPU for 16-bit and weight-only matmuls, bytes/s."""
        return self.gpu.memory_bandwidth_bytes_per_s * self.efficiency.memory_efficiency

    def _weight_bandwidth(self, dtype: str) -> float:
        """Weight-read bandwidth of one GPU for matmuls on weights of ``dtype``, bytes/s.

        FP8 GEMM kernels read their weights at their own fraction of peak (AIC's vLLM data:
        block-scaled FP8 at small batch reads slower than bf16 on H200 and B200).
        """
        if not self._fp8_units(dtype):
            return self._bandwidth
        eff = self.efficiency
        frac = (
            eff.fp8_tensor_memory_efficiency if dtype == "fp8-tensor" else eff.fp8_memory_efficiency
        )
        return self.gpu.memory_bandwidth_bytes_per_s * frac

    @property
    def link_bytes_per_s(self) -> float:
        """One direction of the GPU's link to its TP peers: half the NVLink total, else PCIe."""
        if self.gpu.nvlink_gbps > 0:
            return self.gpu.nvlink_gbps / 2.0 * BYTES_PER_GB
        return self.gpu.pcie_bytes_per_s

    @property
    def hidden(self) -> float:
        """Model width (q_heads x head_dim where the catalog does not give it)."""
        return float(self.model.hidden_size or self.model.q_heads * self.model.head_dim)

    @property
    def flops_per_token(self) -> float:
        """Matmul FLOPs per token without the LM head: 2 x active body parameters."""
        return 2.0 * self.params.body_active

    @property
    def head_flops_per_logit(self) -> float:
        """LM-head FLOPs per sequence whose logits are computed: 2 V h."""
        return 2.0 * self.params.lm_head

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs per (query, key) pair per layer: 2 x q_heads x (d_qk + d_v)."""
        m = self.model
        return 2.0 * m.q_heads * (m.qk_dim + m.v_dim)

    # ---- terms of the step ----------------------------------------------------------------
    def _fixed_s(self) -> float:
        eff, m = self.efficiency, self.model
        us = eff.step_overhead_us + eff.layer_overhead_us * m.layers
        us += eff.moe_layer_overhead_us * self.params.moe_layers
        if m.is_mla:
            us += eff.mla_layer_overhead_us * m.layers
        if self._fp8_units(self.weight_dtype):
            # The small-batch floor of plain FP8 GEMMs, per GEMM: the attention projections
            # (qkv, o) of every layer but MLA ones (timed with their attention in AIC's MLA
            # modules, whose fixed cost mla_layer_overhead carries) and the dense MLPs (gate-up,
            # down). A MoE layer's shared expert pays it beside its routed experts (_experts_s).
            attention = 0 if m.is_mla else GEMMS_PER_PROJECTION_SET * m.layers
            mlp = GEMMS_PER_MLP * self.params.dense_layers
            us += self._fp8_gemm_floor_us() * (attention + mlp)
        return us / US_PER_S

    def _fp8_gemm_floor_us(self) -> float:
        """One plain FP8 GEMM's small-batch floor, us (0 off FP8 units).

        ``fp8_layer_overhead`` is fitted per dense layer of four GEMMs (qkv, o, gate-up,
        down): AIC's B200 block-FP8 GEMM takes 175-190 us at any of 8-4,096 rows for the
        shapes of DeepSeek-V3's shared expert at TP 8 (H200: 60-85 us).
        """
        if not self._fp8_units(self.weight_dtype):
            return 0.0
        eff = self.efficiency
        per_layer = (
            eff.fp8_tensor_layer_overhead_us
            if self.weight_dtype == "fp8-tensor"
            else eff.fp8_layer_overhead_us
        )
        return per_layer / (GEMMS_PER_PROJECTION_SET + GEMMS_PER_MLP)

    def _dense_gemm_s(self, tokens: np.ndarray) -> np.ndarray:
        w = self.params.dense_body / self.tp
        peak, eta = self._peak(self.weight_dtype)
        compute = 2.0 * tile_tokens(tokens, self.efficiency.gemm_tile_tokens) * w / (peak * eta)
        memory = w * self.weight_bytes_per_param / self._weight_bandwidth(self.weight_dtype)
        return soft_roofline(compute, np.full_like(tokens, memory), self.efficiency.gemm_sharpness)

    def _expert_imbalance(self) -> float:
        """Busiest EP rank's load over the mean: ``1 + x log2(ep) / (E / ep)^a``.

        Skewed routing overloads the ranks that hold hot experts; a rank holding ``n = E/ep``
        experts averages their loads, so its excess shrinks with ``n`` (as ``1/sqrt(n)`` for
        independent loads, ``a = 1/2``; ``a`` is fitted per GPU: AIC's A100 data slows EP 8 by
        about 3.5x whether a rank holds 1 expert or 16), and grows with the number of ranks
        to be the busiest of.
        """
        p = self.params
        if self.ep == 1 or not p.experts:
            return 1.0
        per_rank = max(p.experts / self.ep, 1.0)
        eff = self.efficiency
        excess = eff.expert_imbalance * math.log2(self.ep)
        return min(1.0 + excess / per_rank**eff.expert_imbalance_exponent, self._imbalance_cap())

    def _imbalance_cap(self) -> float:
        """The most a rank can be loaded over the mean: each of its experts takes every token.

        A token picks an expert at most once, so a rank of ``n`` experts receives at most
        ``min(n, k) T`` of the ``k T`` token-expert pairs, ``min(n, k) ep / k`` times the mean
        ``k T / ep`` (Mixtral's 8 experts at EP 8, top 2: 4x; the fitted power law alone said
        9.2x on A100, fitted where ranks hold 16 of Qwen3-235B's 128).
        """
        p = self.params
        per_rank = max(p.experts / self.ep, 1.0)
        k = p.experts_per_token
        return min(per_rank, k) * self.ep / k

    def _expert_compute_s(self, tokens: np.ndarray) -> np.ndarray:
        """The busiest EP rank's expert FLOPs over all MoE layers, s (no weight read)."""
        p = self.params
        if p.moe_layers == 0 or p.experts == 0:
            return np.zeros_like(tokens)
        return p.moe_layers * self._expert_parts(tokens)[0]

    def _expert_parts(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(compute, weight read) of one MoE layer on the busiest EP rank, s."""
        p = self.params
        imb = self._expert_imbalance()
        moe_tp = self.tp // self.ep
        expert_tokens = tokens * p.experts_per_token / self.ep * imb
        frac = p.experts_per_token / p.experts
        touched = p.experts / self.ep * -np.expm1(tokens * imb * np.log1p(-frac))
        # A layer waits for its slowest rank, which holds at least its share of the experts the
        # step touches and at least one of them once any token is routed (pigeonhole): one
        # token of Mixtral at EP 8 makes some rank read a whole expert in every layer.
        step_touched = p.experts * -np.expm1(tokens * np.log1p(-frac))
        floor = np.maximum(step_touched / self.ep, np.minimum(step_touched, 1.0))
        touched = np.maximum(touched, floor)
        # Expert GEMMs at the bf16 peak whatever the experts' dtype: AIC's vLLM FP8 MoE kernels
        # measure no faster than bf16 in prefill (Qwen3-30B-A3B on H200: 160 ms FP8 vs 142 ms
        # bf16 at 6 x 3,072 tokens); FP8 halves the bytes, which is what decode gains.
        peak = self.gpu.peak_flops("bf16")
        # Narrow experts (a small width split over moe_tp ranks) make short, inefficient GEMMs.
        width = (self.model.moe_intermediate_size or self.model.intermediate_size) / moe_tp
        half = self.efficiency.moe_half_efficiency_width
        eta = self._expert_efficiency() * (width / (width + half) if width else 1.0)
        compute = 2.0 * p.expert * expert_tokens / moe_tp / (peak * eta)
        bandwidth = self.gpu.memory_bandwidth_bytes_per_s * self.efficiency.moe_memory_efficiency
        memory = touched * p.expert * self.expert_bytes_per_param / moe_tp / bandwidth
        return compute, memory

    def _expert_efficiency(self) -> float:
        """Wide routed experts' fraction of the bf16 peak: 16-bit experts' or quantised ones'.

        Quantised experts (block-FP8, MXFP4) run other kernels than 16-bit ones (AIC's B200
        vLLM data: Qwen3-30B-A3B's MoE op 149 ms in bf16, 231 ms in block FP8 at 12 x 3,072
        tokens), so each has its own fitted fraction, of the bf16 peak for both.
        """
        eff = self.efficiency
        if self.expert_bytes_per_param >= BYTES_PER_BF16:
            return eff.moe_efficiency
        return eff.moe_quant_efficiency

    def _experts_s(self, tokens: np.ndarray) -> np.ndarray:
        p = self.params
        if p.moe_layers == 0 or p.experts == 0:
            return np.zeros_like(tokens)
        compute, memory = self._expert_parts(tokens)
        routed = soft_roofline(compute, memory, self.efficiency.roofline_sharpness)
        # vLLM runs the shared expert on its own stream beside the routed ones (AIC's
        # "moe_overlap" op): a layer takes the longer, here the shared expert's FP8 GEMM floors
        # (its FLOPs and weights are in the dense GEMM term).
        if self.model.shared_expert_intermediate_size:
            routed = np.maximum(routed, GEMMS_PER_MLP * self._fp8_gemm_floor_us() / US_PER_S)
        return p.moe_layers * routed

    def _moe_dispatch_s(self, tokens: np.ndarray) -> np.ndarray:
        """Collectives around the experts (dispatch and combine) beyond the layer's all-reduces, s.

        Per MoE layer, proportional to the hidden activations they move. AIC's ``MoEDispatch``
        is a communication op, 0 at TP 1; in its vLLM graph of GQA MoE models (Mixtral, Qwen3,
        gpt-oss) its two dispatch ops are the layer's two all-reduces (the ``allreduce`` term),
        while its DeepSeek (MLA) graph charges them beside the attention-side all-reduces
        (H200: ~31 ns per token and layer each at hidden 4096, ~56 ns at 7168).
        """
        p = self.params
        if self.tp == 1 or not self.model.is_mla:
            return np.zeros_like(tokens)
        per = self.efficiency.moe_dispatch_ps_per_element * 1e-12
        return p.moe_layers * tokens * self.hidden * per

    def _activation_width(self) -> float:
        """Gated-activation width per rank and token, summed over layers."""
        m, p = self.model, self.params
        dense = p.dense_layers * m.intermediate_size
        moe = p.moe_layers * (
            m.shared_expert_intermediate_size
            + p.experts_per_token * (m.moe_intermediate_size or m.intermediate_size)
        )
        return (dense + moe) / self.tp

    def _elementwise_s(self, tokens: np.ndarray) -> np.ndarray:
        vectors = NORM_VECTORS_PER_LAYER * self.hidden * self.model.layers
        vectors += ACTIVATION_VECTORS * self._activation_width()
        bytes_per_token = vectors * ACTIVATION_BYTES
        return tokens * bytes_per_token / self._bandwidth

    @property
    def allreduces(self) -> int:
        """All-reduces per step: two per layer and one after the embedding (0 at TP 1)."""
        if self.tp == 1:
            return 0
        return ALLREDUCES_PER_LAYER * self.model.layers + EMBEDDING_ALLREDUCES

    def allreduce_one_s(self, tokens: np.ndarray) -> np.ndarray:
        """One all-reduce of the activations of ``tokens`` tokens (``T h`` bf16) at this TP, s."""
        message = np.asarray(tokens, dtype=np.float64) * self.hidden * ACTIVATION_BYTES
        return self.efficiency.allreduce.time_s(self.tp, message, self.link_bytes_per_s)

    def allreduce_latency_s(self) -> float:
        """What one all-reduce costs whatever it carries (its smallest measured message), s."""
        return self.efficiency.allreduce.latency_s(self.tp, self.link_bytes_per_s)

    def _allreduce_s(self, tokens: np.ndarray) -> np.ndarray:
        if self.tp == 1:
            return np.zeros_like(tokens)
        return self.allreduces * self.allreduce_one_s(tokens)

    def _attention_tokens_s(self, tokens: np.ndarray) -> np.ndarray:
        heads = self.model.q_heads / self.tp
        per = self.efficiency.attention_ns_per_token_head / NS_PER_S
        return tokens * heads * self.model.layers * per

    def tokens_s(self, tokens: np.ndarray) -> np.ndarray:
        """Every token-proportional term plus the fixed overhead, s (the table's token part)."""
        t = np.asarray(tokens, dtype=np.float64)
        return (
            self._fixed_s()
            + self._dense_gemm_s(t)
            + self._experts_s(t)
            + self._moe_dispatch_s(t)
            + self._elementwise_s(t)
            + self._allreduce_s(t)
            + self._attention_tokens_s(t)
        )

    def head_s(self, logits: np.ndarray) -> np.ndarray:
        """The LM head for ``logits`` sequences, s (0 for none)."""
        n = np.asarray(logits, dtype=np.float64)
        vh = self.params.lm_head / self.tp
        if vh == 0:
            return np.zeros_like(n)
        peak, eta = self._peak("bf16")
        compute = 2.0 * n * vh / (peak * eta)
        memory = vh * self._table_bytes_per_param / self._bandwidth
        out = soft_roofline(compute, np.full_like(n, memory), self.efficiency.gemm_sharpness)
        return np.where(n > 0, out, 0.0)

    @property
    def s_per_pair(self) -> float:
        """Prefill attention time per layer-weighted (query, key) pair, s."""
        flops = self.attention_flops_per_pair / self.tp
        return flops / (self.gpu.peak_flops("bf16") * self.efficiency.prefill_attention_efficiency)

    @property
    def prefill_attention_fixed_s(self) -> float:
        """Prefill attention's floor in a step with prefill chunks, s."""
        return self.efficiency.prefill_attention_layer_us * self.model.layers / US_PER_S

    @property
    def decode_attention_fixed_s(self) -> float:
        """Decode attention's floor in a step with decode tokens, s."""
        return self.efficiency.decode_attention_layer_us * self.model.layers / US_PER_S

    @property
    def decode_s_per_kv_byte(self) -> float:
        """Decode attention time per KV byte a rank reads, s.

        Memory: ``1 / (BW eta_kv)``. Compute, per key and layer on a rank: GQA ``2 (h_q/tp)
        (d_qk + d_v)``; MLA with absorbed projections ``2 (h_q/tp)(2 r + d_rope)`` (scores over
        the latent and its RoPE part, values over the latent), over the key's bytes per rank.
        """
        m = self.model
        memory = 1.0 / (
            self.gpu.memory_bandwidth_bytes_per_s * self.efficiency.decode_attention_efficiency
        )
        bytes_per_key = self.kv.rank_layout.bytes_per_token / m.layers
        if not bytes_per_key:
            return memory
        heads = m.q_heads / self.tp
        if m.is_mla:
            flops = 2.0 * heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        else:
            flops = 2.0 * heads * (m.qk_dim + m.v_dim)
        peak = self.gpu.peak_flops("bf16") * self.efficiency.prefill_attention_efficiency
        return max(memory, flops / bytes_per_key / peak)

    # ---- the table and what reads it ----------------------------------------------------
    @cached_property
    def step_table(self) -> StepTable:
        """This deployment's step-time table (the one definition of a step's time).

        The roofline's, unless a silicon-sampled table was given (:meth:`with_step_table`).
        """
        if self.table_override is not None:
            return self.table_override
        m = self.model
        return StepTable(
            source=f"roofline ({self.efficiency.source})",
            tokens_grid=TOKENS_GRID,
            tokens_s=self.tokens_s(TOKENS_GRID),
            s_per_pair=self.s_per_pair,
            decode_s_per_kv_byte=self.decode_s_per_kv_byte,
            full_attention_layers=m.full_attention_layers,
            sliding_window_layers=m.sliding_window_layers,
            window_tokens=int(m.sliding_window_tokens or 0),
            logits_grid=LOGITS_GRID,
            logits_s=self.head_s(LOGITS_GRID),
            prefill_attention_fixed_s=self.prefill_attention_fixed_s,
            decode_attention_fixed_s=self.decode_attention_fixed_s,
        )

    def attention_pairs(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Layer-weighted (query, key) pairs of a prefill: sum over layers of attended keys."""
        return self.step_table.attention_pairs(new_tokens, cached_tokens)

    def prefill_flops(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """FLOPs of one prefill: body matmuls, the head for its one logit, and attention."""
        m_tok = np.asarray(new_tokens, dtype=np.float64)
        return (
            self.flops_per_token * m_tok
            + self.head_flops_per_logit
            + self.attention_flops_per_pair * self.attention_pairs(m_tok, cached_tokens)
        )

    def prefill_s(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Latency of prefilling ``new_tokens`` after ``cached_tokens``, alone in a step, s."""
        t = self.step_table
        m_tok = np.asarray(new_tokens, dtype=np.float64)
        pairs = t.attention_pairs(m_tok, cached_tokens)
        return t.step_s(m_tok, pairs, np.zeros_like(m_tok), np.ones_like(m_tok))

    def prefill_compute_s(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """What prefilling ``new_tokens`` adds to a step that runs anyway, s.

        The token-proportional terms only: matmul and expert FLOPs at their efficiencies, norms
        and activations, the all-reduces' bandwidth part, the per-token attention cost and the
        attention pairs; the weight reads, fixed overheads and all-reduce latencies are paid by
        the step whatever it holds. Recomputing a prefix costs this much (``transfer``).
        """
        t = np.asarray(new_tokens, dtype=np.float64)
        p = self.params
        peak, eta = self._peak(self.weight_dtype)
        out = 2.0 * t * p.dense_body / self.tp / (peak * eta)
        out = out + self._expert_compute_s(t) + self._moe_dispatch_s(t) + self._elementwise_s(t)
        out = out + self._attention_tokens_s(t)
        if self.tp > 1:
            out = out + self._allreduce_s(t) - self.allreduces * self.allreduce_latency_s()
        return out + self.s_per_pair * self.attention_pairs(t, cached_tokens)

    def decode_step_s(self, batch: np.ndarray, batch_kv_rank_bytes: np.ndarray) -> np.ndarray:
        """Latency of one decode step for a running batch, s.

        ``batch``: sequences in the step (each one token and one logit); ``batch_kv_rank_bytes``:
        the KV one rank reads for all of them.
        """
        b = np.maximum(np.asarray(batch, dtype=np.float64), 1.0)
        kv = np.asarray(batch_kv_rank_bytes, dtype=np.float64)
        return self.step_table.step_s(b, np.zeros_like(b), kv, b)

    def decode_gpu_s(
        self, input_tokens: np.ndarray, steps: np.ndarray, harmonic_batch: np.ndarray
    ) -> np.ndarray:
        """GPU time charged to each request's decode, s (batch-aware).

        A step serves the whole batch, so a request pays ``1/B`` of each step's token, head and
        decode-attention floor part and all of its own KV read: ``steps (tokens(B) + head(B) +
        decode_fixed) / B + sum_k KV_rank(n + 1 + k) s_kv``, with ``B`` the harmonic-mean batch
        over its decode (``1/B`` is what adds up).
        """
        t = self.step_table
        steps = np.asarray(steps, dtype=np.float64)
        b = np.maximum(np.asarray(harmonic_batch, dtype=np.float64), 1.0)
        first = np.asarray(input_tokens, dtype=np.float64) + 1.0
        own_kv = self.kv.rank_layout.bytes_summed(first, steps)
        shared = (t.tokens_time_s(b) + t.logits_time_s(b) + t.decode_attention_fixed_s) / b
        return steps * shared + own_kv * t.decode_s_per_kv_byte

    def kv_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """Distinct KV bytes (what a storage tier holds) for contexts of ``tokens`` tokens."""
        return self.kv.layout.bytes_for(tokens)

    def kv_rank_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """KV bytes one rank holds (and reads per decode step) for ``tokens`` tokens."""
        return self.kv.rank_layout.bytes_for(tokens)
