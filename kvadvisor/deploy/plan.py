"""A plan's tiers checked against the instance they run on: allowed, how many, what they reach.

The plan loader resolves names to catalog entries (``StagePlan.instance_spec``,
``TierPlan.spec``); this module applies the same rules the advisor uses, so ``review`` and
``analyze`` agree on what an instance can have and what a capped path delivers.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvadvisor.deploy.access import Via, access
from kvadvisor.deploy.reach import nic_bytes_per_s
from kvadvisor.plan.model import StagePlan, TierPlan

SHARED_KINDS = ("filesystem", "pool", "object")


@dataclass(frozen=True)
class TierReach:
    """What a plan tier delivers to its stage, and anything that makes the tier undeployable.

    Bandwidths are per instance for node-local tiers and for the whole fleet (``count``
    instances) for shared tiers, as the review compares them with demand. ``problems`` say
    why the tier cannot be deployed as written (empty when it can, or when the plan names no
    catalog instance to check against).
    """

    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    read_iops: float | None
    write_iops: float | None
    limit: str
    problems: tuple[str, ...] = ()
    unconfirmed: tuple[str, ...] = ()


def _min(value: float | None, cap: float | None) -> float | None:
    if value is None:
        return None
    return value if cap is None else min(value, cap)


def tier_reach(stage: StagePlan, tier: TierPlan) -> TierReach:
    """What ``tier`` of ``stage`` delivers through the stage instance's caps.

    Node-local tiers: the device figure x devices, block volumes capped by the disk bandwidth
    cap (the plan's ``disk_bandwidth_cap``, else the instance's) and its IOPS cap. Shared tiers:
    the pool's figure (per-client figures x the instances, since each client reaches that
    much), capped by the instances' NICs together.
    """
    cap = tier.storage
    inst, spec = stage.instance_spec, tier.spec
    n = tier.devices
    problems: list[str] = []
    unconfirmed: list[str] = []
    via = None
    if inst is not None and spec is not None:
        acc = access(inst, spec)
        if not acc.ok:
            problems.append(acc.reason)
        else:
            via = acc.via
            if acc.max_devices is not None and n > acc.max_devices:
                problems.append(
                    f"{n} x {spec.name} asked, {inst.name} takes {acc.max_devices} ({acc.reason})"
                )
        unconfirmed += [
            f"{spec.name}.{k}"
            for k in ("read_mbps", "write_mbps", "read_iops", "write_iops")
            if spec.is_unconfirmed(k)
        ]
    shared = tier.shared or cap.kind in SHARED_KINDS
    per_client = spec is not None and spec.result_scope == "per_client"
    scale = stage.count if (shared and per_client) else (1 if shared else n)

    def total(x: float | None) -> float | None:
        return None if x is None else x * scale

    read, write = total(cap.read_bytes_per_s), total(cap.write_bytes_per_s)
    riops, wiops = total(cap.read_iops), total(cap.write_iops)
    limit = f"{n} x device" if not shared else "the pool"
    if cap.kind == "block" and not shared:
        disk = stage.disk_bandwidth_cap_bytes_per_s
        if disk is not None and max(read or 0.0, write or 0.0) > disk:
            limit = "the instance's disk bandwidth cap"
        read, write = _min(read, disk), _min(write, disk)
        iops_cap = None if inst is None else inst.disk_cap_iops
        riops, wiops = _min(riops, iops_cap), _min(wiops, iops_cap)
    elif shared and inst is not None:
        nic_via = via or (
            Via.BACKEND
            if spec is not None and spec.client_network == "backend" and inst.backend_network_gbit
            else Via.FRONTEND
        )
        nic = nic_bytes_per_s(inst, nic_via)
        if nic is not None:
            fleet_nic = nic * stage.count
            if (read or 0) > fleet_nic or (write or 0) > fleet_nic:
                limit = f"the instances' {nic_via}"
            read, write = _min(read, fleet_nic), _min(write, fleet_nic)
    return TierReach(
        read, write, riops, wiops, limit, tuple(problems), tuple(dict.fromkeys(unconfirmed))
    )
