"""One storage option sized for a stage on one instance: devices, capacity, what one node reaches.

Sized so that p99 demand per instance uses at most :data:`TARGET_TIER_UTILIZATION` of the tier
where possible, through every cap on the path (:func:`kvadvisor.deploy.reach`): device figures
x devices, the disk cap for block volumes, the NIC for shared systems, a pool shared by the
stage's nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.deploy import Cost, access, reach, tier_cost
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB, BYTES_PER_MB, Unit, format_value
from kvadvisor.units.format import apart, price
from kvadvisor.vocab import Stage

# p99 demand should use at most this share of a tier: headroom for the tail beyond p99 and for
# background work (compaction, eviction) without sizing for the peak.
TARGET_TIER_UTILIZATION = 0.8
# Volumes a block-storage tier stripes across at most, where the instance's own limit is larger
# or unknown: striping beyond eight volumes buys little once the disk cap binds.
MAX_BLOCK_VOLUMES = 8


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
    stage: Stage,
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
    per_dev_bw = one.write_bytes_per_s if stage == Stage.PREFILL else one.read_bytes_per_s
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
    bw = got.write_bytes_per_s if stage == Stage.PREFILL else got.read_bytes_per_s
    iops = got.write_iops if stage == Stage.PREFILL else got.read_iops
    limit = got.write_limit if stage == Stage.PREFILL else got.read_limit
    multiple = spec.result_scope in ("per_drive", "per_volume")
    total_capacity = (size * (devices if multiple else 1)) if size else None
    problems = []
    direction = "write" if stage == Stage.PREFILL else "read"
    if bw is None:
        if demand_bytes_per_s is not None:
            problems.append(f"no published {direction} bandwidth to size it against demand")
    elif demand_bytes_per_s is not None and demand_bytes_per_s > TARGET_TIER_UTILIZATION * bw:
        share = format_value(demand_bytes_per_s / bw, Unit.RATIO)
        problems.append(f"p99 demand is {share} of its bandwidth")
    if (
        demand_iops is not None
        and iops is not None
        and demand_iops > TARGET_TIER_UTILIZATION * iops
    ):
        share = format_value(demand_iops / iops, Unit.RATIO)
        problems.append(f"p99 I/O rate is {share} of its IOPS")
    if capacity_gib and total_capacity is not None and total_capacity < capacity_gib:
        held, needed = apart(total_capacity, capacity_gib, Unit.GIB)
        problems.append(f"holds {held} of the {needed} needed")
    bw_text = (
        f"{direction} bandwidth not published" if bw is None else format_value(bw, Unit.BYTES_PER_S)
    )
    capped = f" (bound by {limit})" if bw is not None and got.capped else ""
    what = f"{devices} x {spec.name}" + (f" at {format_value(size, Unit.GIB)}" if size else "")
    util = (
        ""
        if bw is None or demand_bytes_per_s is None
        else f", p99 demand uses {format_value(demand_bytes_per_s / bw, Unit.RATIO)}"
    )
    cost = tier_cost(spec, total_capacity, devices if multiple else 1)
    hourly = "" if cost.usd_per_hour is None else f", {price(cost.usd_per_hour, 'h')}"
    reason = f"{what}: {bw_text}{capped}{util}{hourly}" + (
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
