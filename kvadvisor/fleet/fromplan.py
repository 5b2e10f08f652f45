"""A plan file's deployment as the replay runs it, every default stated (docs/replay.md).

Defaults where the plan is silent, each from the engine it names:

* tokens per step and running sequences: the plan's vLLM ``max-num-batched-tokens`` and
  ``max-num-seqs``, else vLLM's ``EngineArgs.get_batch_defaults`` for the API server (8,192 and
  1,024 on GPUs of at least 70 GiB other than an A100; else 2,048 and 256: the vLLM engine
  module's ``batch_defaults``, through the registry);
* the KV page: vLLM ``--block-size`` or SGLang ``--page-size``, else the one vLLM runs the
  model with (16, 64 for MLA: the engine registry's ``page``);
* the GPU KV pool: the plan's ``gpu_kv_pool`` per instance split over its replicas, else vLLM's
  ``gpu_memory_utilization`` (the plan's ``vllm.gpu-memory-utilization``, default 0.9) of each
  GPU minus its share of the weights;
* write policy: SGLang HiCache's ``hicache-write-policy`` when given, else write-through
  (LMCache stores on prefill; KVBM and HiCache write through by default);
* prefix loads: SGLang HiCache with a storage backend prefetches at arrival with its
  ``hicache-storage-prefetch-policy`` (default best_effort) and a 256-token threshold; LMCache
  loads at admission and recomputes hits below ``min_retrieve_tokens``; else loads at admission;
* the P-to-D link: the decode instance's network from the instance catalog;
* swap (``preemption: swap``): each GPU's host link (PCIe) from the GPU catalog;
* the load path (docs/replay.md, R5): each tier reaches the share of its rated bandwidth the
  engines' own transfers reach (``perfmodel.transfer.TIER_EFFICIENCY``; none on a catalog
  figure measured per client, which already is such a figure); a host tier (DRAM,
  CXL) is reached over each rank's PCIe link, so a replica gets at most the sum of its ranks'
  links; a file system an engine reaches through its local-disk backend (LMCache
  ``local_disk``, HiCache's ``file`` backend, KVBM's disk tier) gets at most one client link
  (the instance's network) per instance sharing it;
* the front end: the plan's ``frontend`` per request (fixed and per 1,024 prompt tokens), else
  the serving engine's (``perfmodel.frontend``: HTTP, tokenization, block hashing).
"""

from __future__ import annotations

from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.engines import registry
from kvadvisor.errors import ConfigError
from kvadvisor.fleet.build import StepModelInputs, kv_model, pool_tokens, step_model_for
from kvadvisor.fleet.resolved import (
    LoadMode,
    Preemption,
    PrefetchPolicy,
    ResolvedFleet,
    ResolvedLink,
    ResolvedScheduler,
    ResolvedStage,
    ResolvedTier,
    RouterPolicy,
    Scope,
    WritePolicy,
)
from kvadvisor.perfmodel.calibrate import StepCalibration
from kvadvisor.perfmodel.frontend import frontend_defaults
from kvadvisor.perfmodel.memory import DEFAULT_MEMORY_UTILIZATION
from kvadvisor.perfmodel.transfer import engine_share
from kvadvisor.plan.model import KvLoadPlan, LinkPlan, Plan, StagePlan, TierPlan
from kvadvisor.units import BYTES_PER_GB, Unit, format_value
from kvadvisor.units.format import number
from kvadvisor.vocab import Stage, Topology

VLLM_BLOCK_TOKENS = 16  # the page where no engine names one: vLLM's default block


def _fail(plan: Plan, where: str, what: str) -> ConfigError:
    return ConfigError(f"{plan.path}: {where}: {what}")


def _batch_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """Vllm serve's tokens per step and running sequences on ``gpu`` (the engine registry's)."""
    return registry.batch_defaults(gpu.name, gpu.memory_bytes)


def _page_tokens(stage: StagePlan, attention: str) -> int:
    """The plan's page, else its engine settings', else the one vLLM runs this model with."""
    if stage.scheduler.page_tokens:
        return stage.scheduler.page_tokens
    page = registry.first(stage.engines, "page_tokens")
    if page is not None:
        return int(page)
    return registry.page_for("vllm", attention, stage.gpu.architecture).tokens


def _load_plan(stage: StagePlan) -> tuple[KvLoadPlan, str]:
    """The stage's prefix-load behaviour and where it comes from."""
    if stage.kv_load is not None:
        return stage.kv_load, "the plan's kv_load"
    found = registry.answers(stage.engines, "kv_load")
    # An engine that prefetches at arrival loads before one that loads at admission would.
    found.sort(key=lambda answer: answer[0].mode != "prefetch")
    return found[0] if found else (KvLoadPlan(), "loads at admission (vLLM KV connector)")


def _write_policy(stage: StagePlan) -> WritePolicy:
    policy = stage.write_policy
    if policy is None:
        policy = str(registry.first(stage.engines, "write_policy") or "write_through")
    return (
        WritePolicy.WRITE_BACK
        if policy in ("write_back", "on_eviction")
        else WritePolicy.WRITE_THROUGH
    )


# Engines whose local-disk backend reaches a file-system tier as plain POSIX files, one client
# per instance, say so (Engine.local_disk_backend).
def _local_disk_backend(stage: StagePlan) -> str | None:
    """The engine that reaches a file system through its local-disk backend, or None."""
    return registry.first(stage.engines, "local_disk_backend")


def _link_efficiency(link: LinkPlan, dec: StagePlan) -> tuple[float, str]:
    """The share of the P-to-D link's rate KV moves at, and where it comes from.

    The plan's ``pd_link.efficiency`` when given; else, on a catalog instance's network, its
    fabric's (a TCP fabric moves KV at Mooncake's TCP share: the fabric catalog); else 1.
    """
    if link.efficiency is not None:
        return link.efficiency, "the plan's"
    spec = dec.instance_spec
    if link.bandwidth_bytes_per_s is None and spec is not None:
        fabric = spec.fabric
        kind = "RDMA" if fabric.rdma else "no RDMA, KV over TCP"
        return fabric.link_efficiency, f"{fabric.display_name}, {kind} (fabric catalog)"
    return 1.0, "the plan's bandwidth as given"


def _client_link(stage: StagePlan) -> float | None:
    """A POSIX client's link: the instance's front-end (VPC/Ethernet) NIC, else its network."""
    spec = stage.instance_spec
    if spec is not None and spec.frontend_network_gbit:
        return spec.frontend_network_gbit * BYTES_PER_GB / 8.0  # Gbit/s to bytes/s
    return stage.network_bytes_per_s


def _load_path(
    stage: StagePlan, tier: TierPlan, tp: int, rpi: int, rates: list[float]
) -> tuple[list[float], str]:
    """The tier's read and write rates as the engines move KV, and how they were derived."""
    kind = tier.storage.kind
    eff, source = engine_share(
        kind, tier.efficiency, tier.storage.measured, tier.storage.catalog_name
    )
    why = [f"efficiency {number(eff)} ({source})"]
    sharing = {"replica": 1, "instance": rpi, "pooled": rpi * stage.count}[tier.scope]
    if kind in ("dram", "cxl") and stage.gpu is not None:
        # each rank's own PCIe link, summed over the replicas' ranks that share the unit
        links = stage.gpu.pcie_bytes_per_s * tp * sharing
        rates = [min(r, links) for r in rates]
        why.append(f"at most {format_value(links, Unit.BYTES_PER_S)}: {tp * sharing} PCIe links")
    backend = _local_disk_backend(stage) if kind == "filesystem" else None
    link = _client_link(stage)
    if backend is not None and link:
        clients = link * max(sharing // rpi, 1)
        rates = [min(r, clients) for r in rates]
        why.append(
            f"at most {format_value(clients, Unit.BYTES_PER_S)}: reached through the "
            f"{backend}, one client link per instance"
        )
    return [r * eff for r in rates], "; ".join(why)


def _frontend(stage: StagePlan) -> tuple[float, float, str]:
    """The front-end cost per request and per prompt token, s: the plan's, else the engine's."""
    fixed, per_token, why = frontend_defaults(stage.engines)
    if stage.frontend_fixed_s is None and stage.frontend_per_ki_token_s is None:
        return fixed, per_token, why
    if stage.frontend_fixed_s is not None:
        fixed = stage.frontend_fixed_s
    if stage.frontend_per_ki_token_s is not None:
        per_token = stage.frontend_per_ki_token_s / 1024.0
    return fixed, per_token, f"the plan's frontend ({why} where it is silent)"


def _tier(
    plan: Plan, stage: StagePlan, i: int, tier: TierPlan, kvb: float, tp: int, rpi: int
) -> tuple[ResolvedTier, str]:
    where = f"stages.{stage.stage}.tiers[{i}]"
    st = tier.storage
    rates = []
    for rate, key in ((st.read_bytes_per_s, "read_bandwidth"), (st.write_bytes_per_s, "write")):
        if rate is None:
            raise _fail(
                plan,
                f"{where}.storage",
                f"its {key.replace('_', ' ')} is unknown and the replay needs it; give "
                f"storage.{key if key != 'write' else 'write_bandwidth'} (e.g. '5 GB/s')",
            )
        total = rate * tier.devices
        if st.kind == "block" and stage.disk_bandwidth_cap_bytes_per_s:
            total = min(total, stage.disk_bandwidth_cap_bytes_per_s)  # the instance's disk cap
        rates.append(total)
    rates, why = _load_path(stage, tier, tp, rpi, rates)
    spec = ResolvedTier(
        name=tier.name,
        kind=st.kind,
        scope=Scope(tier.scope),
        capacity_tokens=None if tier.capacity_bytes is None else tier.capacity_bytes / kvb,
        read_bytes_per_s=rates[0],
        write_bytes_per_s=rates[1],
        latency_s=st.latency_s or 0.0,
        read_iops=None if st.read_iops is None else st.read_iops * tier.devices,
        io_tokens=tier.io_tokens or stage.io_chunk_tokens()[0],
        write_buffer_bytes=tier.write_buffer_bytes,
        drop_when_full=tier.on_full == "drop",
    )
    return spec, f"tier {tier.name}: {why}"


def _stage(
    plan: Plan, stage: StagePlan, role: Stage, inputs: StepModelInputs
) -> tuple[ResolvedStage, list[str]]:
    where = f"stages.{stage.stage}"
    spec = plan.model.spec
    assert spec is not None
    if stage.gpu is None:
        raise _fail(plan, where, "the replay needs the GPU: give instance (or gpu)")
    tp = stage.gpus_per_replica or plan.model.tp
    pm, step = step_model_for(
        spec, stage.gpu, tp, plan.model.kv_dtype, plan.model.weight_dtype, inputs
    )
    kv = kv_model(spec, plan.model.kv_dtype, tp)
    rpi = stage.replicas_per_instance or 1
    notes = []
    flags = registry.first(stage.engines, "scheduler") or {}
    if stage.gpu_kv_pool_bytes is not None:
        pool = int(stage.gpu_kv_pool_bytes / rpi / kv.gpu_bytes_per_token)
        if pool < 1:
            raise _fail(plan, f"{where}.gpu_kv_pool", "holds less than one token per replica")
    else:
        util = float(flags.get("gpu_memory_utilization", DEFAULT_MEMORY_UTILIZATION))
        pool = pool_tokens(pm, util, where=f"{plan.path}: {where}.gpus_per_replica")
    batched, seqs = _batch_defaults(stage.gpu)
    batched = int(flags.get("max_batched_tokens", batched))
    seqs = int(flags.get("max_seqs", seqs))
    sched = stage.scheduler
    load, load_from = _load_plan(stage)
    built = [
        _tier(plan, stage, i, t, kv.bytes_per_token, tp, rpi) for i, t in enumerate(stage.tiers)
    ]
    tiers = tuple(spec for spec, _ in built)
    save = stage.save_decode_kv
    if save is None:
        save = any(registry.answers(stage.engines, "saves_decode_kv")) or (
            role is Stage.DECODE and bool(tiers)
        )
    notes.append(
        f"{stage.stage}: {stage.count} x {stage.instance or stage.gpu.name}, {rpi} replica(s) of "
        f"{tp} GPU(s) each; GPU KV pool {format_value(pool, Unit.TOKENS)} per replica; prefix "
        f"loads: {load_from}"
    )
    notes += [f"{stage.stage}: {why}" for _, why in built]
    fe_fixed, fe_per_token, fe_why = _frontend(stage)
    notes.append(f"{stage.stage}: front end {fe_why}")
    return (
        ResolvedStage(
            role=role,
            instances=stage.count,
            replicas_per_instance=rpi,
            gpus_per_replica=tp,
            step=step,
            pool_tokens=pool,
            scheduler=ResolvedScheduler(
                max_batched_tokens=sched.max_num_batched_tokens or batched,
                max_seqs=sched.max_num_seqs or seqs,
                page_tokens=_page_tokens(stage, spec.attention),
                preemption=Preemption(sched.preemption or Preemption.RECOMPUTE),
            ),
            router=RouterPolicy(stage.router),
            tiers=tiers,
            write_policy=_write_policy(stage),
            load_mode=LoadMode(load.mode),
            prefetch_policy=PrefetchPolicy(load.prefetch_policy),
            prefetch_timeout_base_s=load.prefetch_timeout_s,
            prefetch_timeout_per_ki_token_s=load.prefetch_timeout_per_ki_token_s,
            min_load_tokens=load.min_tokens or 0,
            offload_tier=stage.decode_offload,
            save_decode_kv=save,
            swap_bytes_per_s=stage.gpu.pcie_bytes_per_s * tp,
            frontend_fixed_s=fe_fixed,
            frontend_per_token_s=fe_per_token,
            instance=stage.instance,
            gpu=stage.gpu.name,
            kv=kv,
        ),
        notes,
    )


def resolve_plan(
    plan: Plan, calibration: StepCalibration | None = None
) -> tuple[ResolvedFleet, tuple[str, ...]]:
    """The deployment a plan describes, and notes saying which defaults it took (ConfigError).

    Step times come from the catalogs the plan was checked against (``plan.catalogs``) and,
    for a stage on the GPU and model it was measured on, ``calibration``: the coefficients
    fitted to the trace's measured requests (``fleet.build.step_model_for``).
    """
    inputs = StepModelInputs(plan.catalogs, calibration)
    spec = plan.model.spec
    if spec is None:
        raise _fail(
            plan,
            "model.name",
            "the replay needs a catalog model (its shape sets step times and the GPU pool); "
            "give model.name",
        )
    if plan.topology is Topology.AGGREGATED:
        serving = plan.stage(Stage.SERVING)
        assert serving is not None
        stage, notes = _stage(plan, serving, Stage.SERVING, inputs)
        dep = ResolvedFleet(
            plan.name, Topology.AGGREGATED, (stage,), kv_model(spec, plan.model.kv_dtype)
        )
        return dep, tuple(notes)
    pre, dec = plan.stage(Stage.PREFILL), plan.stage(Stage.DECODE)
    if pre is None or dec is None:
        raise _fail(
            plan,
            "stages",
            "a disaggregated replay needs both prefill and decode blocks; or give one "
            "serving block (aggregated)",
        )
    p_stage, p_notes = _stage(plan, pre, Stage.PREFILL, inputs)
    d_stage, d_notes = _stage(plan, dec, Stage.DECODE, inputs)
    link = plan.pd_link
    nic = link.bandwidth_bytes_per_s or dec.network_bytes_per_s
    if nic is None:
        raise _fail(
            plan,
            "pd_link.bandwidth",
            "the decode instance's network is not in the catalog; give the P-to-D link's "
            "bandwidth per decode instance (e.g. '50 GB/s')",
        )
    efficiency, why = _link_efficiency(link, dec)
    notes = [
        *p_notes,
        *d_notes,
        f"P-to-D link: {format_value(nic * efficiency, Unit.BYTES_PER_S)} per decode "
        f"instance ({'the plan' if link.bandwidth_bytes_per_s else 'the instance catalog'}, "
        f"efficiency {format_value(efficiency, Unit.RATIO)}: {why})",
    ]
    dep = ResolvedFleet(
        plan.name,
        Topology.DISAGGREGATED,
        (p_stage, d_stage),
        kv_model(spec, plan.model.kv_dtype),
        ResolvedLink(nic * efficiency, link.latency_s),
    )
    return dep, tuple(notes)
