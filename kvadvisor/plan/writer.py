"""The one plan writer: a Plan as the mapping plan.yaml holds (docs/review.md keys).

Every plan kvadvisor writes goes through here: the advisor's candidates (the verdict's plan,
``--emit plan``), the deployment emit writes without a verdict, and the recommendation the
analysis replays. Quantities are written by :mod:`kvadvisor.units` (exact, never short), so
:func:`kvadvisor.plan.check_plan` reads back the plan that was written.

A key is written when the plan states it: optional fields when not None, defaulted ones when
they differ from the loader's default; ``name``, ``topology``, the model's
``tp`` and dtype, a stage's ``count`` and ``tiers``, and a tier's ``capacity`` and ``scope``
always. A stage on a catalog instance leaves out what the instance says (GPU, host memory);
its engine settings are written as the plan holds them, merged from its files and its own.
"""

from __future__ import annotations

from typing import Any

import yaml

from kvadvisor.plan.loader import instance_resources
from kvadvisor.plan.model import KvLoadPlan, LinkPlan, Plan, SchedulerPlan, StagePlan, TierPlan
from kvadvisor.units import written_rate, written_size, written_time

_DEFAULT_LOAD = KvLoadPlan()


def _storage(tier: TierPlan) -> str | dict[str, Any]:
    """A catalog entry by name; else the capability inline (kind, rates, IOPS, latency)."""
    st = tier.storage
    if st.catalog_name is not None:
        return st.catalog_name
    out: dict[str, Any] = {"kind": st.kind}
    if st.read_bytes_per_s is not None:
        out["read_bandwidth"] = written_rate(st.read_bytes_per_s)
    if st.write_bytes_per_s is not None:
        out["write_bandwidth"] = written_rate(st.write_bytes_per_s)
    if st.read_iops is not None:
        out["read_iops"] = st.read_iops
    if st.write_iops is not None:
        out["write_iops"] = st.write_iops
    if st.latency_s is not None:
        out["latency"] = written_time(st.latency_s)
    return out


def _tier(tier: TierPlan) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tier.name, "storage": _storage(tier)}
    out["capacity"] = None if tier.capacity_bytes is None else written_size(tier.capacity_bytes)
    if tier.devices != 1:
        out["devices"] = tier.devices
    out["scope"] = tier.scope
    if tier.write_buffer_bytes is not None:
        out["write_buffer"] = written_size(tier.write_buffer_bytes)
    if tier.on_full != "block":
        out["on_full"] = tier.on_full
    if tier.io_tokens is not None:
        out["io_tokens"] = tier.io_tokens
    if tier.efficiency is not None:
        out["efficiency"] = tier.efficiency
    return out


def _scheduler(s: SchedulerPlan) -> dict[str, Any]:
    fields = {
        "max_num_batched_tokens": s.max_num_batched_tokens,
        "max_num_seqs": s.max_num_seqs,
        "page_tokens": s.page_tokens,
        "preemption": s.preemption,
    }
    return {k: v for k, v in fields.items() if v is not None}


def _kv_load(load: KvLoadPlan) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": load.mode}
    if load.prefetch_policy != _DEFAULT_LOAD.prefetch_policy:
        out["prefetch_policy"] = load.prefetch_policy
    if load.prefetch_timeout_s:
        out["prefetch_timeout"] = written_time(load.prefetch_timeout_s)
    if load.prefetch_timeout_per_ki_token_s:
        out["prefetch_timeout_per_ki_token"] = written_time(load.prefetch_timeout_per_ki_token_s)
    if load.min_tokens is not None:
        out["min_tokens"] = load.min_tokens
    return out


def _hardware(stage: StagePlan) -> dict[str, Any]:
    """The instance by name, and what the stage sets that differs from the instance's own."""
    spec = stage.instance_spec
    host, disk, gpu, gpus = None, None, None, None
    if spec is not None:
        host, disk, _ = instance_resources(spec)
        gpu, gpus = spec.gpu.lower(), spec.gpu_count
    out: dict[str, Any] = {}
    if stage.instance is not None:
        out["instance"] = stage.instance
    if stage.gpu is not None and stage.gpu.name.lower() != gpu:
        out["gpu"] = stage.gpu.name
    if stage.gpus_per_instance is not None and stage.gpus_per_instance != gpus:
        out["gpus_per_instance"] = stage.gpus_per_instance
    if stage.host_memory_bytes is not None and stage.host_memory_bytes != host:
        out["host_memory"] = written_size(stage.host_memory_bytes)
    cap = stage.disk_bandwidth_cap_bytes_per_s
    if cap is not None and cap != disk:
        out["disk_bandwidth_cap"] = written_rate(cap)
    return out


def _stage(stage: StagePlan) -> dict[str, Any]:
    out = _hardware(stage)
    out["count"] = stage.count
    if stage.gpus_per_replica is not None:
        out["gpus_per_replica"] = stage.gpus_per_replica
    if stage.replicas_per_instance is not None:
        out["replicas_per_instance"] = stage.replicas_per_instance
    if stage.router != "round_robin":
        out["router"] = stage.router
    if stage.gpu_kv_pool_bytes is not None:
        out["gpu_kv_pool"] = written_size(stage.gpu_kv_pool_bytes)
    if stage.chunk_tokens is not None:
        out["chunk_tokens"] = stage.chunk_tokens
    if scheduler := _scheduler(stage.scheduler):
        out["scheduler"] = scheduler
    if stage.write_policy is not None:
        out["write_policy"] = stage.write_policy
    if stage.kv_load is not None:
        out["kv_load"] = _kv_load(stage.kv_load)
    if stage.decode_offload is not None:
        out["decode_offload"] = stage.decode_offload
    if stage.save_decode_kv is not None:
        out["save_decode_kv"] = stage.save_decode_kv
    frontend = {
        "fixed": stage.frontend_fixed_s,
        "per_ki_token": stage.frontend_per_ki_token_s,
    }
    if any(v is not None for v in frontend.values()):
        out["frontend"] = {k: written_time(v) for k, v in frontend.items() if v is not None}
    if stage.engines:
        # Merged from the files and the plan's own; the plan's win when read back, so the
        # merged settings read back as they are.
        out["engines"] = {e: dict(settings) for e, settings in stage.engines.items()}
    if stage.engine_files:
        out["engine_files"] = list(stage.engine_files)
    # Tiers last: a reader meets the stage's settings first, then its hierarchy.
    out["tiers"] = [_tier(t) for t in stage.tiers]
    return out


def _pd_link(link: LinkPlan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if link.bandwidth_bytes_per_s is not None:
        out["bandwidth"] = written_rate(link.bandwidth_bytes_per_s)
    if link.efficiency is not None:
        out["efficiency"] = link.efficiency
    if link.latency_s:
        out["latency"] = written_time(link.latency_s)
    return out


def plan_mapping(plan: Plan) -> dict[str, Any]:
    """``plan`` as the mapping plan.yaml holds, in the order docs/review.md lists the keys."""
    m = plan.model
    model: dict[str, Any] = {}
    if m.name is not None:
        model["name"] = m.name
    if m.kv_bytes_per_token is not None:
        model["kv_bytes_per_token"] = m.kv_bytes_per_token
    model.update(tp=m.tp, kv_dtype=m.kv_dtype)
    if m.weight_dtype is not None:
        model["weight_dtype"] = m.weight_dtype
    out: dict[str, Any] = {"name": plan.name}
    if plan.description:
        out["description"] = plan.description
    out["model"] = model
    slo = {"ttft_p99": plan.slo.ttft_p99_s, "tpot_p99": plan.slo.tpot_p99_s}
    if any(v is not None for v in slo.values()):
        out["slo"] = {k: written_time(v) for k, v in slo.items() if v is not None}
    if plan.traffic_scale != 1.0:
        out["traffic"] = {"scale": plan.traffic_scale}
    out["topology"] = plan.topology.value
    if link := _pd_link(plan.pd_link):
        out["pd_link"] = link
    out["stages"] = {s.stage.value: _stage(s) for s in plan.stages}
    return out


def plan_yaml(plan: Plan) -> str:
    """``plan`` as plan.yaml text (no header)."""
    return yaml.safe_dump(plan_mapping(plan), sort_keys=False)
