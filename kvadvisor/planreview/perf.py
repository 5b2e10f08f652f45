"""What the performance model knows for a plan's stages: KV size, device KV pool, recompute time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from kvadvisor.errors import ConfigError
from kvadvisor.perfmodel import PerfModel, kv_size, memory_fit, recompute_s
from kvadvisor.plan.model import Plan
from kvadvisor.units import Unit, format_value

RecomputeFn = Callable[[np.ndarray], np.ndarray]


def capacity(nbytes: float | None) -> str:
    """A pool's size as every report shows sizes; None is unbounded."""
    return "unbounded" if nbytes is None else format_value(nbytes, Unit.BYTES)


def q(value: float | None, unit: Unit) -> str:
    """A number in a note, by the one formatter ("unknown" when None)."""
    return "unknown" if value is None else format_value(value, unit)


@dataclass(frozen=True)
class StagePerf:
    """What the performance model knows for one stage: device KV pool and recompute time.

    ``recompute_s(tokens)`` is the time one instance takes to prefill that many tokens
    (vectorised); None when no model/GPU figures are available.
    """

    device_pool_bytes: float | None = None
    recompute_s: RecomputeFn | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanPerf:
    """The model's KV bytes per token and per-stage performance figures."""

    kv_bytes_per_token: int
    stages: Mapping[str, StagePerf] = field(default_factory=dict)


def plan_perf(plan: Plan) -> PlanPerf:
    """KV bytes per token and, per stage, the GPU KV pool and recompute time (perfmodel).

    The KV size comes from the plan when it gives one, else from the model catalog (DESIGN.md's
    formula, distinct bytes as a storage tier keeps them). The device pool is the perfmodel's KV
    budget at vLLM's default memory utilization, for every TP group of the instance.
    """
    m = plan.model
    kvb = m.kv_bytes_per_token
    if kvb is None and m.spec is not None:
        kvb = int(round(kv_size(m.spec, m.kv_dtype, m.tp).total_bytes_per_token))
    if kvb is None:
        raise ConfigError(
            f"{plan.path}: model: KV bytes per token unknown; give a catalog "
            "model name or model.kv_bytes_per_token"
        )
    stages: dict[str, StagePerf] = {}
    for stage in plan.stages:
        if m.spec is None or stage.gpu is None:
            stages[stage.stage] = StagePerf(
                notes=(
                    "no catalog model or GPU for this stage: "
                    "device pool and recompute time unknown",
                )
            )
            continue
        # The stage's own TP (gpus_per_replica: a disaggregated plan may run its stages at
        # different TPs), else the model's.
        tp = stage.gpus_per_replica or m.tp
        pm = PerfModel.build(
            m.spec,
            stage.gpu,
            tp=tp,
            kv_dtype=m.kv_dtype,
            weight_dtype=m.weight_dtype,
            catalogs=plan.catalogs,
        )
        fit = memory_fit(pm, 1.0)
        groups = (stage.gpus_per_instance or tp) / tp
        pool = fit.kv_capacity_tokens * kvb * groups if fit.weights_fit else 0.0
        stages[stage.stage] = StagePerf(
            device_pool_bytes=pool,
            recompute_s=lambda p, pm=pm: recompute_s(pm, p),
            notes=(
                f"{stage.stage}: {m.spec.name} on {stage.gpu.name} × {tp} (TP): modeled KV "
                f"pool {capacity(pool)} per instance at {q(fit.utilization, Unit.RATIO)} "
                "GPU memory"
                + (
                    ""
                    if stage.gpu_kv_pool_bytes is None
                    else f"; the plan's gpu_kv_pool of {capacity(stage.gpu_kv_pool_bytes)} is used"
                ),
                *((unsure,) if (unsure := stage.gpu.unconfirmed_note()) else ()),
            ),
        )
    return PlanPerf(kvb, stages)
