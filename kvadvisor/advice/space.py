"""The search space: every way to run the model on an instance type, and the bounds that prune it.

A :class:`Shape` is one instance type with a tensor-parallel degree: its replicas per instance
(the instance's GPUs over TP), each replica's GPU KV pool, its step times and its vLLM batch
defaults. A shape whose weights leave no room for the longest request's KV is refused with the
numbers (no verdict for a GPU the model does not fit). For the shapes that fit,
:func:`bounds` gives analytic bounds from the step-time model alone, with no queueing:

* latency alone: a request served by an idle replica, its cached prefix already in GPU memory
  (hits at unbounded capacity), prefills in chunks of the step budget; if even then the target
  percentile of TTFT (or of TPOT at batch 1) misses the SLO, no count of this shape meets it;
* busy time: prefill at the most efficient chunk (the step budget) and decode at the largest
  batch the pool holds take at least ``P`` and ``D`` replica-seconds; fewer instances than
  ``(P + D) / (span x replicas per instance)`` cannot keep up, whatever the queueing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.engines import registry
from kvadvisor.errors import CatalogError, ConfigError
from kvadvisor.fleet import slo_percentiles
from kvadvisor.fleet.build import StepModelInputs, pool_tokens, roofline_for
from kvadvisor.perfmodel import KvSize, PerfModel, kv_size
from kvadvisor.perfmodel.memory import TP_CHOICES
from kvadvisor.perfmodel.step import StepTable
from kvadvisor.units import Unit, format_value, plural
from kvadvisor.vocab import Stage


@dataclass(frozen=True)
class Shape:
    """The model on one instance type at one TP degree (per replica unless said otherwise)."""

    instance: InstanceSpec
    gpu: GpuSpec
    tp: int
    pool_tokens: int  # GPU KV pool of one replica, tokens
    step: StepTable
    kv: KvSize  # the model's KV per token at this TP (perfmodel.kv_size)
    max_batched_tokens: int
    max_seqs: int

    @property
    def replicas_per_instance(self) -> int:
        """Model replicas on one instance: its GPUs over TP."""
        return self.instance.gpu_count // self.tp

    @property
    def price(self) -> float | None:
        """The instance's on-demand $/h (None when not published)."""
        return self.instance.price_usd_per_hour

    @property
    def label(self) -> str:
        """E.g. "p5en.48xlarge TP 2 (4 replicas)"."""
        replicas = plural(self.replicas_per_instance, "replica")
        return f"{self.instance.name} TP {self.tp} ({replicas})"


def batch_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """VLLM's tokens per step and running sequences for the API server on this GPU.

    ``EngineArgs.get_batch_defaults``, defined once in the vLLM engine module and read through
    the engine registry: the plan replay and the emitted files use the same.
    """
    return registry.batch_defaults(gpu.name, gpu.memory_bytes)


@dataclass(frozen=True, eq=False)
class _Catalogs:
    """The perf catalogs as a cache key: by identity (their mappings are not hashable).

    The cache holds the key, so the catalogs it refers to stay alive and their id unique.
    """

    catalogs: PerfCatalogs

    def __hash__(self) -> int:
        return id(self.catalogs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Catalogs) and other.catalogs is self.catalogs


_PACKAGED = _Catalogs(PerfCatalogs.packaged())


@lru_cache(maxsize=256)
def _perf(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    kv_dtype: str,
    weight_dtype: str,
    catalogs: _Catalogs = _PACKAGED,
) -> tuple[PerfModel, StepTable, KvSize]:
    inputs = StepModelInputs(catalogs.catalogs)
    pm, step = roofline_for(model, gpu, tp, kv_dtype, weight_dtype, inputs)
    return pm, step, kv_size(model, kv_dtype, tp)


def shapes(
    instance: InstanceSpec,
    model: ModelSpec,
    kv_dtype: str,
    weight_dtype: str,
    longest_tokens: int,
    catalogs: PerfCatalogs | None = None,
    tps: tuple[int, ...] = TP_CHOICES,
) -> tuple[list[Shape], list[str]]:
    """Every TP degree of ``instance`` that fits the model, and why each other one does not.

    A shape fits when the weights fit (vLLM's 0.9 of GPU memory) and one replica's pool holds
    the longest request's KV (``longest_tokens``: prompt plus output, or the prompt alone on a
    prefill-only stage). ``catalogs``: the GPUs and step models (the packaged ones when None);
    ``tps``: the TP degrees tried (``--tp`` restricts them to one).
    """
    catalogs = catalogs or PerfCatalogs.packaged()
    key = _Catalogs(catalogs)
    try:
        gpu = catalogs.gpu(instance.gpu)
    except CatalogError:
        return [], [f"{instance.name}: its GPU {instance.gpu} is not in the GPU catalog"]
    out: list[Shape] = []
    refused: list[str] = []
    for tp in tps:
        if tp > instance.gpu_count or instance.gpu_count % tp:
            continue
        problem = model.parallel_problem(tp)
        if problem is not None:  # Qwen2.5-7B's 28 heads at TP 8: no engine would serve it
            refused.append(f"{instance.name} {problem.split('; give')[0]}")
            continue
        try:
            pm, step, kv = _perf(model, gpu, tp, kv_dtype, weight_dtype, key)
            pool = pool_tokens(pm, where=f"{instance.name} TP {tp}")
        except ConfigError as exc:
            refused.append(str(exc).split("; give")[0])
            continue
        if pool < longest_tokens:
            refused.append(
                f"{instance.name} TP {tp}: a replica's GPU KV pool holds "
                f"{format_value(pool, Unit.TOKENS)}, fewer than the longest request's "
                f"{format_value(longest_tokens, Unit.TOKENS)}"
            )
            continue
        batched, seqs = batch_defaults(gpu)
        out.append(Shape(instance, gpu, tp, pool, step, kv, batched, seqs))
    if not out and not refused:
        refused.append(
            f"{instance.name}: TP {tps[0]} does not divide its {instance.gpu_count} GPUs"
            if len(tps) == 1
            else f"{instance.name}: no TP degree in {tps} divides its GPUs"
        )
    return out, refused


@dataclass(frozen=True)
class Work:
    """The sample's per-request work: prompt tokens, hits at unbounded capacity, outputs, span."""

    input_tokens: np.ndarray
    hit_tokens: np.ndarray
    output_tokens: np.ndarray
    span_s: float

    @property
    def new_tokens(self) -> np.ndarray:
        """Prompt tokens to prefill with every hit served (at least one)."""
        return np.maximum(self.input_tokens - self.hit_tokens, 1)


@dataclass(frozen=True, eq=False)
class Bounds:
    """Analytic bounds of one shape on the sample (seconds; replica-seconds of work)."""

    ttft_alone_s: Mapping[float, float]  # percentile -> TTFT of a request alone
    tpot_alone_s: Mapping[float, float]  # percentile -> TPOT at batch 1
    prefill_replica_s: float
    decode_replica_s: float
    mean_batch_bound: float
    ttft_alone_per_request_s: np.ndarray | None = None

    def instances_needed(self, replicas_per_instance: int, span_s: float, role: Stage) -> int:
        """Fewest instances whose replicas can do the ``role``'s work in the span (busy 100%)."""
        work = {
            Stage.SERVING: self.prefill_replica_s + self.decode_replica_s,
            Stage.PREFILL: self.prefill_replica_s,
            Stage.DECODE: self.decode_replica_s,
        }[role]
        return max(1, math.ceil(work / max(span_s, 1e-9) / replicas_per_instance))


def _prefill_alone_s(shape: Shape, new: np.ndarray, cached: np.ndarray) -> np.ndarray:
    """Prefill time alone, chunked by the step budget (full chunks, then the rest)."""
    step, budget = shape.step, shape.max_batched_tokens
    full = np.floor(new / budget)
    rest = new - full * budget
    tokens = full * step.tokens_time_s(budget) + np.where(rest > 0, step.tokens_time_s(rest), 0.0)
    return tokens + step.s_per_pair * step.attention_pairs(new, cached)


def bounds(shape: Shape, work: Work, percentiles: tuple[float, ...]) -> Bounds:
    """The shape's latency-alone percentiles and its least work on the sample (vectorised)."""
    step, kv = shape.step, shape.kv
    new = work.new_tokens.astype(np.float64)
    cached = (work.input_tokens - work.new_tokens).astype(np.float64)
    ttft = _prefill_alone_s(shape, new, cached)
    ctx = work.input_tokens.astype(np.float64) + work.output_tokens / 2.0
    kv_rank = kv.rank_layout.full_bytes_per_token * ctx
    tpot = step.tokens_time_s(1.0) + step.decode_s_per_kv_byte * kv_rank
    multi = work.output_tokens > 1
    # Prefill at its most efficient: whole step budgets (per-token time falls with the chunk).
    per_token = float(step.tokens_time_s(shape.max_batched_tokens)) / shape.max_batched_tokens
    prefill = float(new.sum()) * per_token + step.s_per_pair * float(
        step.attention_pairs(new, cached).sum()
    )
    # Decode at the largest batch the pool holds (capped by the running-sequence limit).
    mean_ctx = float(ctx.mean()) if ctx.size else 1.0
    batch = max(1.0, min(float(shape.max_seqs), shape.pool_tokens / max(mean_ctx, 1.0)))
    out = work.output_tokens.astype(np.float64)
    decode = float(out.sum()) * float(step.tokens_time_s(batch)) / batch + float(
        step.decode_s_per_kv_byte * (out * kv_rank).sum()
    )
    pct = _alone(ttft, percentiles)
    tp = _alone(tpot[multi], percentiles)
    return Bounds(pct, tp, prefill, decode, batch, ttft)


def _alone(values: np.ndarray, percentiles: tuple[float, ...]) -> dict[float, float]:
    """Each percentile as the SLO check reads it (a bound and a replay judge alike); 0 if none."""
    got = slo_percentiles(values, percentiles)
    return {p: 0.0 if math.isnan(v) else v for p, v in zip(percentiles, got, strict=True)}
