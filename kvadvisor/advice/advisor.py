"""The advisor (pure): choose an instance and KV tiers per stage, compute their facts, run rules.

Sizing principles, each stated in the report:

* Tiers are sized for the p99 of windowed demand, not the peak (peaks go to a host DRAM buffer)
  and not the mean; a tier is a good fit when p99 demand uses at most TARGET_TIER_UTILIZATION
  of it, and the best fit is the one closest to that target (least idle capacity).
* Demand is per instance: the trace's demand divided by the stage's instance count, which comes
  from the stage's GPU time when the split is known (prefill scales with TFLOPS, decode with
  memory bandwidth); otherwise one instance carries the whole trace, and the notes say so.
* Local tiers of an instance hold its share of the KV working set (prefix-aware routing
  partitions it); shared tiers (file systems, KV pools, object storage) hold all of it.
* An instance is offered only the storage it can have (:mod:`kvadvisor.deploy`: its own NVMe,
  its provider's volumes and file systems; drives you buy only on your own servers), and a
  tier is credited with what one node reaches through the instance's disk cap or NIC.
* Ties are broken by price (on-demand $/h; unpriced last), then by catalog order, never by name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvadvisor.advice.inputs import AdvisorInputs
from kvadvisor.advice.stages import (
    PREFILL,
    STAGE_ROLES,
    StageContext,
    StageRole,
    TierChoice,
    fact_value,
)
from kvadvisor.catalog.instances import InstanceSpec, find_instance
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.catalog.storage import CATEGORIES, StorageSpec, find_storage
from kvadvisor.deploy import (
    Cost,
    access,
    host_tier_name,
    instance_cost,
    reach,
    same_deployment,
    tier_cost,
)
from kvadvisor.errors import CatalogError, ConfigError
from kvadvisor.facts.registry import collect
from kvadvisor.facts.workload import div, report_facts
from kvadvisor.results.common import Utilization
from kvadvisor.results.report import (
    AdviceReport,
    Alternative,
    Deployment,
    Evidence,
    Finding,
    PrefixCache,
    Recommendation,
    RuleOutcome,
    StageRecommendation,
    Tier,
)
from kvadvisor.results.vocab import Stage, TierRole
from kvadvisor.rules import Evaluation, FactValue, Rule, evaluate, workload_rules
from kvadvisor.rules.engine import matches, resolve_where
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB, BYTES_PER_MB, plural

# p99 demand should use at most this share of a tier: headroom for the tail beyond p99 and for
# background work (compaction, eviction) without sizing for the peak.
TARGET_TIER_UTILIZATION = 0.8
# Average GPU busy share an instance count is sized for (leaves room for arrival bursts).
TARGET_GPU_UTILIZATION = 0.7
# Share of GPU memory usable by weights + KV (engines keep the rest for activations; vLLM's
# default gpu_memory_utilization is 0.9).
GPU_MEMORY_USABLE = 0.9
# AIConfigurator's naive-config rule: total GPU memory above 1.5 x the weights.
WEIGHTS_HEADROOM = 1.5
# SGLang HiCache sizes the host pool at 0.8 of host memory when neither ratio nor size is set.
HOST_KV_FRACTION = 0.8
# Volumes a block-storage tier stripes across at most, where the instance's own limit is larger
# or unknown: striping beyond eight volumes buys little once the disk cap binds.
MAX_BLOCK_VOLUMES = 8
MAX_ALTERNATIVES = 5


@dataclass(frozen=True)
class AdvisorOptions:
    """Advisor knobs: chunk size, a storage spec for both stages, instances per stage."""

    chunk_tokens: int = 256
    storage: str | None = None
    instance: Mapping[str, str] = field(default_factory=dict)  # stage -> name ("both" allowed)
    preferred_gpu: str | None = None  # the GPU the user modeled (--gpu): its instances first


@dataclass(frozen=True)
class Advice:
    """What the advisor returns: the recommendation, the findings and all facts used."""

    recommendation: Recommendation
    findings: tuple[Finding, ...]
    facts: dict[str, FactValue]
    evaluation: Evaluation


_v = fact_value


# -- instances ----------------------------------------------------------------------------------
def _fits(inst: InstanceSpec, weights_gib: float | None) -> bool:
    return weights_gib is None or inst.gpu_memory_total_gib > WEIGHTS_HEADROOM * weights_gib


def _price_key(inst: InstanceSpec) -> float:
    """On-demand $/h for ordering: unpriced instances after every priced one."""
    price = inst.price_usd_per_hour
    return math.inf if price is None else price


def rank_instances(
    role: StageRole,
    instances: Mapping[str, InstanceSpec],
    facts: Mapping[str, FactValue],
    preferred_gpu: str | None = None,
) -> list[tuple[InstanceSpec, bool, str]]:
    """Instances ranked for a stage.

    Instances ranked for a stage: memory fit first, then the stage's bottleneck per GPU
    (higher first), then fewer GPUs (the smallest size that fits), then the lower on-demand
    price; equal keys keep catalog order (the sort is stable), never alphabetical order.
    """
    weights = _v(facts, "model_weights_gib")
    unit = role.bottleneck

    def key(inst: InstanceSpec) -> tuple[Any, ...]:
        metric = role.gpu_metric(inst)
        return (
            not _fits(inst, weights),
            preferred_gpu is not None and inst.gpu != preferred_gpu,
            metric is None,
            -(metric or 0.0),
            inst.gpu_count,
            _price_key(inst),
        )

    out = []
    for inst in sorted(instances.values(), key=key):
        metric = role.gpu_metric(inst)
        fits = _fits(inst, weights)
        what = f"{metric:,.0f} {unit} per GPU" if metric is not None else f"no {unit} figure"
        cost = instance_cost(inst)
        price = cost.basis + (" (unconfirmed)" if cost.unconfirmed else "")
        reason = f"{inst.gpu_count} x {inst.gpu}: {what}; {price}"
        if weights is not None:
            reason += (
                f"; {inst.gpu_memory_total_gib:,.0f} GiB GPU memory "
                f"{'>' if fits else '<='} {WEIGHTS_HEADROOM} x {weights:,.0f} GiB weights"
            )
        out.append((inst, fits, reason))
    return out


def instance_count(
    role: StageRole, inst: InstanceSpec, facts: Mapping[str, FactValue]
) -> tuple[int | None, str]:
    """Instances a stage needs from its GPU time.

    Instances a stage needs from its GPU time, scaled from the GPU the split was computed
    for to this one by the stage's bottleneck; None when the split or that GPU is unknown.
    """
    stage = role.stage
    busy_s = _v(facts, role.gpu_s_fact)
    duration = _v(facts, "trace_duration_s")
    ref, mine = _v(facts, role.split_gpu_fact), role.gpu_metric(inst)
    if busy_s is None or not duration:
        return None, f"{stage} GPU time unknown: one instance assumed to carry the whole trace"
    if ref is None or mine is None:
        return None, (
            f"the GPU the stage split was computed for is unknown: one {stage} "
            "instance assumed to carry the whole trace"
        )
    modeled = busy_s / duration
    busy_gpus = modeled * ref / mine
    count = max(1, math.ceil(busy_gpus / inst.gpu_count / TARGET_GPU_UTILIZATION))
    return count, (
        f"{stage}: {busy_s:,.0f} GPU-s over "
        f"{duration:,.0f} s = {modeled:.2f} busy GPUs of the modeled GPU, x "
        f"{ref:g}/{mine:g} for {inst.gpu} = {busy_gpus:.2f}; / {inst.gpu_count} GPUs "
        f"/ {TARGET_GPU_UTILIZATION:.0%} target = {plural(count, 'instance')}"
    )


# -- storage ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TierFit:
    """A storage option sized for one stage on one instance (bandwidths per instance)."""

    spec: StorageSpec
    capacity_gib: float | None
    devices: int
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    read_iops: float | None
    write_iops: float | None
    feasible: bool
    reason: str
    cost: Cost = field(default_factory=lambda: Cost(None, None, "no price in the catalog"))
    unconfirmed: tuple[str, ...] = ()


def _available_on(spec: StorageSpec, inst: InstanceSpec) -> bool:
    """Whether ``inst`` can have ``spec`` as a capacity tier (its host memory is apart)."""
    return spec.category != "memory" and access(inst, spec).ok


def _size_for(spec: StorageSpec, need_mbps: float | None, capacity_gib: float | None) -> float:
    """Size of one device, volume or pool for a capacity and a bandwidth.

    Smallest size that holds ``capacity_gib`` and, for size-scaled disks and pools, reaches the
    bandwidth (inverting ``base + per_gib × C``), within the option's limits and in its steps.
    """
    size = capacity_gib or 0.0
    formula = (
        spec.per_gib.get("mbps") or spec.per_gib.get("write_mbps") or spec.per_gib.get("read_mbps")
    )
    if formula is not None and need_mbps is not None and formula["per_gib"] > 0:
        ceiling = formula.get("max", math.inf)
        target = min(need_mbps, ceiling)
        size = max(size, (target - formula.get("base", 0.0)) / formula["per_gib"])
    if spec.capacity_min_gib is not None:
        size = max(size, spec.capacity_min_gib)
    if spec.capacity_step_gib and size:
        size = math.ceil(size / spec.capacity_step_gib) * spec.capacity_step_gib
    if spec.capacity_max_gib is not None:
        size = min(size, spec.capacity_max_gib)
    return math.ceil(size) if size else size


def _drive_size_gib(spec: StorageSpec, per_drive_gib: float) -> float | None:
    """The sold size of a drive you buy that holds ``per_drive_gib`` (else its largest)."""
    if not spec.capacities_gb:
        return None
    sizes = sorted(gb * BYTES_PER_GB / BYTES_PER_GIB for gb in spec.capacities_gb)
    return next((g for g in sizes if g >= per_drive_gib), sizes[-1])


def fit_tier(
    spec: StorageSpec,
    role: StageRole,
    inst: InstanceSpec,
    demand_bytes_per_s: float | None,
    demand_iops: float | None,
    capacity_gib: float | None,
    devices_limit: int | None = None,
    instances: int = 1,
) -> TierFit:
    """Size one storage option for a stage on one instance.

    Devices and capacity so p99 demand (per instance) stays under the target utilization where
    possible; feasible when it does and the capacity fits. Bandwidth is what one instance
    reaches (:func:`kvadvisor.deploy.reach`): device figures x devices, through the disk cap
    for block volumes and the NIC for shared systems, a pool shared by ``instances`` nodes.

    ``devices_limit`` caps the device count (1 for a spec given with --storage: one device or
    volume of that kind, sized up to its own maximum).
    """
    acc = access(inst, spec)
    nodes = max(1, instances)
    pooled = spec.result_scope == "whole_pool"
    need = (
        None
        if demand_bytes_per_s is None
        else (demand_bytes_per_s / TARGET_TIER_UTILIZATION / BYTES_PER_MB)
    )
    # A pool is sized for every node's demand; a device for this node's.
    size = _size_for(spec, None if need is None else need * (nodes if pooled else 1), capacity_gib)
    if spec.category in ("block", "ephemeral"):
        max_devices = min(acc.max_devices or MAX_BLOCK_VOLUMES, MAX_BLOCK_VOLUMES)
    else:
        max_devices = acc.max_devices or 1
    if devices_limit is not None:
        max_devices = max(1, min(max_devices, devices_limit))
    fixed_gib = acc.device_gib  # built-in drives come in one size
    one = reach(inst, spec, 1, fixed_gib or size or None, nodes)
    per_dev_bw = role.bandwidth(one)
    devices = 1
    if need is not None and per_dev_bw and not pooled and spec.result_scope != "per_client":
        devices = min(max_devices, max(1, math.ceil(need * BYTES_PER_MB / per_dev_bw)))
    if capacity_gib and spec.category == "local_nvme":
        each = fixed_gib or _drive_size_gib(spec, capacity_gib / devices)
        if each:
            devices = min(max_devices, max(devices, math.ceil(capacity_gib / each)))
            size = fixed_gib or _drive_size_gib(spec, capacity_gib / devices) or size
    elif fixed_gib:
        size = fixed_gib
    got = reach(inst, spec, devices, size or None, nodes)
    bw, iops = role.bandwidth(got), role.iops(got)
    limit = got.write_limit if role.direction == "write" else got.read_limit
    multiple = spec.result_scope in ("per_drive", "per_volume")
    total_capacity = (size * (devices if multiple else 1)) if size else None
    problems = []
    direction = role.direction
    if bw is None:
        if demand_bytes_per_s is not None:
            problems.append(f"no published {direction} bandwidth to size it against demand")
    elif demand_bytes_per_s is not None and demand_bytes_per_s > TARGET_TIER_UTILIZATION * bw:
        problems.append(f"p99 demand is {demand_bytes_per_s / bw:.0%} of its bandwidth")
    if (
        demand_iops is not None
        and iops is not None
        and demand_iops > TARGET_TIER_UTILIZATION * iops
    ):
        problems.append(f"p99 I/O rate is {demand_iops / iops:.0%} of its IOPS")
    if capacity_gib and total_capacity is not None and total_capacity < capacity_gib:
        problems.append(f"holds {total_capacity:,.0f} of the {capacity_gib:,.0f} GiB needed")
    bw_text = (
        f"{direction} bandwidth not published" if bw is None else f"{bw / BYTES_PER_GB:,.2f} GB/s"
    )
    capped = f" (bound by {limit})" if bw is not None and got.capped else ""
    what = f"{devices} x {spec.name}" + (f" at {size:,.0f} GiB" if size else "")
    util = (
        ""
        if bw is None or demand_bytes_per_s is None
        else f", p99 demand uses {demand_bytes_per_s / bw:.0%}"
    )
    cost = tier_cost(spec, total_capacity, devices if multiple else 1)
    price = "" if cost.usd_per_hour is None else f", ${cost.usd_per_hour:,.2f}/h"
    reason = f"{what}: {bw_text}{capped}{util}{price}" + (
        "; " + "; ".join(problems) if problems else ""
    )
    return TierFit(
        spec=spec,
        capacity_gib=total_capacity,
        devices=devices,
        read_bytes_per_s=got.read_bytes_per_s,
        write_bytes_per_s=got.write_bytes_per_s,
        read_iops=got.read_iops,
        write_iops=got.write_iops,
        feasible=not problems,
        reason=reason,
        cost=cost,
        unconfirmed=got.unconfirmed,
    )


def _writes_unknown(spec: StorageSpec) -> bool:
    """No write figure although one exists (unpublished), as opposed to a read-only option."""
    return spec.is_unconfirmed("write_mbps", "mbps")


def rank_tiers(
    role: StageRole,
    inst: InstanceSpec,
    storage: Mapping[str, StorageSpec],
    demand_bytes_per_s: float | None,
    demand_iops: float | None,
    capacity_local_gib: float | None,
    capacity_shared_gib: float | None,
    instances: int = 1,
) -> list[TierFit]:
    """Options ``inst`` can have for a stage's capacity tier, best first.

    Demand is per instance; shared options hold the whole working set and are shared by
    ``instances`` nodes. Shipping parts before prototypes and announcements; then feasible
    options first; built-in drives (already paid for) before bought ones; among the rest,
    prefill prefers the one whose p99 utilization is closest to the target (least idle
    bandwidth), decode prefers lower read latency first; then the lower price; equal keys
    keep catalog order.
    """
    fits = []
    for spec in storage.values():
        if not _available_on(spec, inst):
            continue
        read_only = (
            spec.write_mbps is None
            and not any(k in spec.per_gib for k in ("mbps", "write_mbps"))
            and not _writes_unknown(spec)
        )
        if read_only or spec.category in role.skipped_categories:
            continue  # a KV tier is written (by prefill, or for decode's reads to find it)
        shared = spec.shared
        fits.append(
            fit_tier(
                spec,
                role,
                inst,
                demand_bytes_per_s,
                None if shared else demand_iops,
                capacity_shared_gib if shared else capacity_local_gib,
                instances=instances,
            )
        )

    def key(f: TierFit) -> tuple[Any, ...]:
        cap = role.bandwidth(f)
        util = div(demand_bytes_per_s, cap)
        closeness = abs(TARGET_TIER_UTILIZATION - util) if util is not None else 1.0
        order = CATEGORIES.index(f.spec.category)
        price = math.inf if f.cost.usd_per_hour is None else f.cost.usd_per_hour
        return (
            f.spec.announced_only,
            not f.feasible,
            not f.spec.built_in,
            *role.rank_key(f.spec, cap, closeness),
            order,
            price,
        )

    return sorted(fits, key=key)


# -- the advisor --------------------------------------------------------------------------------
def _demand(facts: Mapping[str, FactValue], role: StageRole, count: int) -> dict[str, float | None]:
    """The stage's demand per instance: mean, p99 and peak bytes per second."""
    return {stat: div(_v(facts, name), count) for stat, name in role.demand_facts.items()}


def _stage_instance(
    role: StageRole,
    options: AdvisorOptions,
    instances: Mapping[str, InstanceSpec],
    facts: Mapping[str, FactValue],
    storage: Mapping[str, StorageSpec],
    prefill: InstanceSpec | None = None,
) -> tuple[InstanceSpec, list[Alternative]]:
    """The stage's instance and the ranked alternatives.

    ``prefill``: the prefill stage's instance, for decode: decode is chosen where prefill runs
    (one provider, or your own servers), since the KV cache moves between them.
    """
    fixed = find_storage(storage, options.storage) if options.storage else None
    ranked = rank_instances(role, instances, facts, options.preferred_gpu)
    if fixed is not None:
        # Storage fixed with --storage: only instances that can have it are candidates.
        ranked = [r for r in ranked if access(r[0], fixed).ok] or ranked
    if prefill is not None:
        ranked = [r for r in ranked if same_deployment(prefill, r[0]).ok] or ranked
    alternatives = [
        Alternative("instance", inst.name, i + 1, reason, fits)
        for i, (inst, fits, reason) in enumerate(ranked[:MAX_ALTERNATIVES])
    ]
    chosen = options.instance.get(role.stage) or options.instance.get(Stage.BOTH)
    if chosen:
        inst = find_instance(instances, chosen)
        if fixed is not None and not (acc := access(inst, fixed)).ok:
            raise ConfigError(
                f"--storage {fixed.name} cannot be used with --instance {inst.name}: {acc.reason}"
            )
        return inst, alternatives
    return ranked[0][0], alternatives


def _cost_and_confidence_notes(inst: InstanceSpec, fit: TierFit | None) -> list[str]:
    """The instance's and tier's price, and every unconfirmed figure the choice rests on."""
    cost = instance_cost(inst)
    notes = [f"{inst.name}: {cost.basis}" + (" (unconfirmed)" if cost.unconfirmed else "")]
    used = [f"{inst.name}.{f}" for f in inst.unconfirmed]
    if fit is not None:
        if fit.cost.usd_per_hour is not None or fit.cost.basis:
            tier_price = (
                f"${fit.cost.usd_per_hour:,.2f}/h" if fit.cost.usd_per_hour is not None else ""
            )
            notes.append(
                f"{fit.spec.name}: "
                + "; ".join(p for p in (tier_price, fit.cost.basis) if p)
                + (" (unconfirmed)" if fit.cost.unconfirmed else "")
            )
        used += list(fit.unconfirmed)
    if used:
        notes.append("unconfirmed figures this choice uses: " + ", ".join(used))
    return notes


def advise(
    workload: Mapping[str, FactValue],
    prefix_cache: PrefixCache | None,
    storage: Mapping[str, StorageSpec],
    instances: Mapping[str, InstanceSpec],
    rules: Sequence[Rule],
    options: AdvisorOptions | None = None,
    breakeven: Mapping[str, tuple[float | None, float | None]] | None = None,
) -> Advice:
    """Recommend instances and KV tiers per stage, then evaluate the rules on all facts.

    ``breakeven`` maps the stage profiler's reference tiers to (break-even prefix tokens,
    share of hit tokens below it); the decode tier's class picks the entry.
    """
    options = options or AdvisorOptions()
    facts: dict[str, FactValue] = dict(workload)
    kv = _v(facts, "kv_bytes_per_token")
    weights = _v(facts, "model_weights_gib")
    ws_gib = _v(facts, "kv_working_set_gib")
    retention_gib = _v(facts, "retention_capacity_gib")
    needed_gib = max((g for g in (ws_gib, retention_gib) if g is not None), default=None)
    shared_spec = find_storage(storage, options.storage) if options.storage else None
    stages: dict[Stage, StageRecommendation] = {}
    config: list[tuple[str, Any]] = [("shared_storage_spec", shared_spec is not None)]
    chosen: dict[Stage, InstanceSpec] = {}

    for role in STAGE_ROLES:
        stage = role.stage
        inst, inst_alts = _stage_instance(
            role, options, instances, facts, storage, chosen.get(Stage.PREFILL)
        )
        chosen[stage] = inst
        count, count_note = instance_count(role, inst, facts)
        n = count or 1
        kind = role.direction
        demand = _demand(facts, role, n)
        iops_p99 = div(_v(facts, role.iops_fact), n)
        local_gib = None if needed_gib is None else needed_gib / n
        gpu_pool = (
            GPU_MEMORY_USABLE * inst.gpu_memory_total_gib - weights if weights is not None else None
        )
        host_pool = (
            HOST_KV_FRACTION * inst.host_memory_gib if inst.host_memory_gib is not None else None
        )
        beyond_host = local_gib is not None and host_pool is not None and local_gib > host_pool
        ranked = rank_tiers(
            role,
            inst,
            storage,
            demand["p99"],
            iops_p99,
            local_gib,
            needed_gib,
            instances=n,
        )
        notes = [count_note] if count is None else []
        if (
            role is not PREFILL
            and not (together := same_deployment(chosen[Stage.PREFILL], inst)).ok
        ):
            notes.append(together.reason)
        if shared_spec is not None:
            spec = shared_spec
            fit = fit_tier(
                spec,
                role,
                inst,
                demand["p99"],
                None if spec.shared else iops_p99,
                needed_gib if spec.shared else local_gib,
                devices_limit=1,
                instances=n,
            )
            notes.append(
                f"storage fixed by --storage {spec.name} for both stages: one "
                "device or volume of it per instance"
            )
        elif ranked and (beyond_host or _v(facts, role.demand_facts["p99"]) is not None):
            fit, spec = ranked[0], ranked[0].spec
        else:
            spec = storage[host_tier_name(inst)]
            fit = None
            if needed_gib is not None:
                notes.append("no capacity tier: the KV working set fits the host DRAM pool")
            elif _v(facts, "kv_working_set_tokens") is not None and kv is None:
                notes.append(
                    "no capacity tier sized: the KV working set is "
                    f"{_v(facts, 'kv_working_set_tokens'):,.0f} tokens but KV bytes "
                    "per token are unknown (give the model)"
                )
            else:
                notes.append("no capacity tier: KV working set and I/O demand unknown")
        if weights is None:
            notes.append(
                f"model unknown: instances ranked by per-GPU {role.bottleneck_short} only, "
                "without a memory-fit check"
            )
        notes += _cost_and_confidence_notes(inst, fit)
        # Demand and bandwidth are both per instance, shared tiers included (what one node
        # reaches of a pool is its share, bounded by its NIC).
        cap = None if fit is None else role.bandwidth(fit)
        ctx = StageContext(
            instance=inst,
            tier=TierChoice(
                spec,
                None if fit is None else fit.capacity_gib,
                cap,
                None if fit is None else role.iops(fit),
            ),
            instances=n,
            demand=demand,
            iops_p99=iops_p99,
            gpu_pool_gib=gpu_pool,
            host_pool_gib=host_pool,
            facts=facts,
            prefix_cache=prefix_cache,
            breakeven=breakeven or {},
        )
        config += role.tier_facts(ctx)
        config += [
            (role.instance_count_fact, count),
            (role.gpu_tflops_fact, inst.gpu_bf16_tflops),
            (role.gpu_bandwidth_fact, inst.gpu_memory_bandwidth_gbps),
        ]
        config += role.stage_facts(ctx)

        host = host_tier_name(inst)
        tiers = [Tier(host, "memory", TierRole.HOST_POOL, host_pool)]
        if fit is not None:
            tiers.append(
                Tier(
                    spec.name,
                    spec.category,
                    role.tier_role,
                    fit.capacity_gib,
                    fit.devices,
                    spec.shared,
                )
            )
        derivation = (
            [
                f"{kind} demand: p99 of {_v(facts, 'io_window_s') or 0:g}-second windows of KV "
                f"{role.demand_words}, divided by {plural(n, f'{stage} instance')}",
                f"IOPS: that rate / chunk size ({options.chunk_tokens} tokens"
                " x KV bytes per token)",
                f"sized so p99 uses at most {TARGET_TIER_UTILIZATION:.0%} of the tier; peaks above "
                "it go to the host DRAM buffer",
            ]
            if demand["p99"] is not None
            else ["I/O demand unavailable (needs the stage profiler's write/read series)"]
        )
        if needed_gib is not None:
            derivation.append(
                f"capacity: the KV working set {needed_gib:,.1f} GiB "
                f"(shared tiers) or / {plural(n, 'instance')} (local tiers)"
            )
        storage_alts = [
            Alternative("storage", f.spec.name, i + 1, f.reason, f.feasible)
            for i, f in enumerate(ranked[:MAX_ALTERNATIVES])
        ]
        stages[stage] = StageRecommendation(
            instance=inst.name,
            storage=spec.name,
            instance_count=count,
            gpu=inst.gpu,
            tiers=tuple(tiers),
            required=role.requirement(demand["p99"], iops_p99, local_gib, tuple(derivation)),
            chunk_tokens=options.chunk_tokens,
            retention_s=_v(facts, "retention_ttl_s"),
            utilization=Utilization(
                div(demand["mean"], cap),
                div(demand["p99"], cap),
                div(demand["peak"], cap),
                f"{kind} demand per instance / {spec.name} {kind} bandwidth",
            ),
            alternatives=tuple(storage_alts + inst_alts),
            notes=tuple(notes),
            gpus_per_instance=inst.gpu_count,
            gpu_memory_gib=inst.gpu_memory_gib,
            host_memory_gib=inst.host_memory_gib,
        )

    # A configuration fact replaces a workload fact of its name; None removes it (decode's
    # break-even when its tier's class has no reference tier).
    for name, value in config:
        if value is None:
            facts.pop(name, None)
    facts.update(collect(config))
    evaluation = evaluate(workload_rules(rules), facts)
    findings = tuple(
        _finding(f.rule, f.message, f.evidence, facts, storage, instances, chosen)
        for f in sorted(evaluation.fired, key=lambda f: (-f.rule.severity.rank, f.rule.code))
    )
    outcomes = tuple(
        sorted(
            [RuleOutcome(f.rule.code, f.rule.name, True, f.reason) for f in evaluation.fired]
            + [RuleOutcome(q.rule.code, q.rule.name, False, q.reason) for q in evaluation.quiet],
            key=lambda o: o.code,
        )
    )
    recommendation = Recommendation(
        prefill=stages[Stage.PREFILL],
        decode=stages[Stage.DECODE],
        shared_storage=shared_spec is not None,
        rules=outcomes,
        facts={n: {"value": f.value, "unit": f.unit} for n, f in sorted(facts.items())},
    )
    return Advice(recommendation, findings, facts, evaluation)


def _finding(
    rule: Rule,
    message: str,
    evidence: dict[str, Any],
    facts: Mapping[str, FactValue],
    storage: Mapping[str, StorageSpec],
    instances: Mapping[str, InstanceSpec],
    chosen: Mapping[str, InstanceSpec] | None = None,
) -> Finding:
    """A fired rule as a finding.

    Its storage candidates are options the chosen instance(s) of the rule's stage can have
    (never a drive a cloud VM cannot take).
    """
    candidates: tuple[str, ...] = ()
    rec = rule.recommend
    if rec is not None and rec.catalog is not None:
        query = resolve_where(rec.where, facts)
        if query is not None:
            on = [
                inst
                for stage, inst in (chosen or {}).items()
                if rule.stage.value in (stage, "both")
            ]
            rows = (
                [
                    s.as_row()
                    for s in storage.values()
                    if s.category != "memory" and all(access(i, s).ok for i in on)
                ]
                if rec.catalog == "storage"
                else [i.as_row() for i in instances.values()]
            )
            hits = [r for r in rows if matches(r, query)]
            if rec.rank_by:
                key = rec.rank_by.lstrip("-")
                hits = [r for r in hits if r.get(key) is not None]
                # Stable sort: equal keys keep catalog order (never alphabetical order).
                hits.sort(key=lambda r: r[key], reverse=rec.rank_by.startswith("-"))
            candidates = tuple(r["name"] for r in hits[:MAX_ALTERNATIVES])
    return Finding(
        code=rule.code,
        severity=rule.severity,
        stage=rule.stage,
        message=message,
        evidence={
            name: Evidence(item["value"], item["unit"], item["text"])
            for name, item in evidence.items()
        },
        name=rule.name,
        summary=rule.summary,
        action=rec.action if rec else "",
        candidates=candidates,
        references=rule.docs.references,
    )


# -- the report --------------------------------------------------------------------------------
def parse_instance_choice(values: Sequence[str]) -> dict[str, str]:
    """``--instance NAME`` for both stages, or ``prefill=NAME`` / ``decode=NAME``."""
    out: dict[str, str] = {}
    for value in values:
        stage, sep, name = value.partition("=")
        if not sep:
            stage, name = "both", value
        if stage not in (Stage.BOTH, *(r.stage for r in STAGE_ROLES)) or not name:
            raise ConfigError(f"--instance {value!r}: expected NAME, prefill=NAME or decode=NAME")
        out[stage] = name
    return out


def _deployment(report: AdviceReport) -> Deployment | None:
    return report.model.deployment if report.model is not None else None


def _split_gpu_facts(report: AdviceReport, gpus: PerfCatalogs) -> dict[str, float]:
    """Figures of the GPU the stage split was modeled on.

    TFLOPS and memory bandwidth of the GPU the stage split was modeled on, from the GPU
    catalog (``gpus``, with the user's files); empty when the split was measured on an unknown
    GPU.
    """
    deployment = _deployment(report)
    if report.stage_split is None or deployment is None or not deployment.gpu:
        return {}
    try:
        gpu = gpus.gpu(deployment.gpu)
    except CatalogError:
        return {}
    return {
        "split_gpu_bf16_tflops": gpu.bf16_dense_tflops,
        "split_gpu_memory_bandwidth_gbps": gpu.memory_bandwidth_gbps,
    }


def advise_report(
    report: AdviceReport,
    inputs: AdvisorInputs,
    options: AdvisorOptions,
    extra_facts: Mapping[str, Any] | None = None,
) -> AdviceReport:
    """The report with ``recommendation`` and ``findings`` filled from its own sections.

    ``extra_facts`` are facts a producer computed from results the report does not carry
    (registered names; None values are dropped); they take precedence.
    """
    deployment = _deployment(report)
    if deployment is not None and not deployment.gpu_assumed:
        options = replace(options, preferred_gpu=deployment.gpu)
    workload = report_facts(report, chunk_tokens=options.chunk_tokens)
    workload.update(collect(_split_gpu_facts(report, inputs.perf).items()))
    workload.update(collect((extra_facts or {}).items()))
    breakeven = {
        t.tier: (t.break_even_tokens, t.hit_token_share_below)
        for t in (report.io.load_vs_recompute if report.io is not None else ())
    }
    advice = advise(
        workload,
        report.prefix_cache,
        inputs.storage,
        inputs.instances,
        inputs.rules,
        options,
        breakeven,
    )
    return replace(
        report,
        recommendation=advice.recommendation,
        findings=tuple(report.findings) + advice.findings,
    )


def refresh_findings(
    report: AdviceReport,
    inputs: AdvisorInputs,
    options: AdvisorOptions,
    extra_facts: Mapping[str, Any] | None = None,
) -> AdviceReport:
    """The rules evaluated again on the report's sections as they now stand; same choice.

    After the recommended deployment is replayed, the stage split is the closed loop's; the
    facts drawn from the report (split, demand, cache) are recomputed, the advisor's own facts
    (tiers, configuration) kept, and the findings re-evaluated on them, so every finding quotes
    the figures the report shows. The recommendation itself is the one that was replayed.
    """
    rec = report.recommendation
    if rec is None:
        return report
    facts = collect((name, item["value"]) for name, item in rec.facts.items())
    facts.update(report_facts(report, chunk_tokens=options.chunk_tokens))
    facts.update(collect(_split_gpu_facts(report, inputs.perf).items()))
    facts.update(collect((extra_facts or {}).items()))
    chosen = {
        role.stage: inputs.instances[name]
        for role in STAGE_ROLES
        if (name := getattr(rec, role.stage.value).instance) in inputs.instances
    }
    evaluation = evaluate(inputs.rules, facts)
    findings = tuple(
        _finding(f.rule, f.message, f.evidence, facts, inputs.storage, inputs.instances, chosen)
        for f in sorted(evaluation.fired, key=lambda f: (-f.rule.severity.rank, f.rule.code))
    )
    outcomes = tuple(
        sorted(
            [RuleOutcome(f.rule.code, f.rule.name, True, f.reason) for f in evaluation.fired]
            + [RuleOutcome(q.rule.code, q.rule.name, False, q.reason) for q in evaluation.quiet],
            key=lambda o: o.code,
        )
    )
    advised = {f.code for f in report.findings if f.code in {o.code for o in rec.rules}}
    others = tuple(f for f in report.findings if f.code not in advised)
    return replace(
        report,
        findings=others + findings,
        recommendation=replace(
            rec,
            rules=outcomes,
            facts={n: {"value": f.value, "unit": f.unit} for n, f in sorted(facts.items())},
        ),
    )
