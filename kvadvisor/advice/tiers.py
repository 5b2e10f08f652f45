"""The KV tiers a prefill (or serving) node can have, from the mechanisms that use them.

Prefix hits below the GPU pool are loaded before prefill and new KV is written after it, on the
nodes that prefill (DESIGN.md), so tiers belong to the prefill or serving stage; a decode node
receives the prompt's KV over the P-to-D link and needs storage only for its own mechanisms
(decode-time offload, preemption swaps, write-back of decode KV), which the verdict states.

* Host memory: the instance's own, so not bought; :data:`HOST_KV_FRACTION` of it holds KV (SGLang
  HiCache's default host share) and loads cross the GPUs' host links (PCIe or the superchip
  link), which bound it: the catalog's DRAM figures are far above them.
* A capacity tier below it, only when the reuse measurements say the KV worth keeping is larger
  than the fleet's host memory and the trace has block hashes (no reuse evidence, no purchase:
  CA03). Its capacity is the larger of the working set and the retention capacity (the KV
  the trace reuses within its retention time), per node when the tier is a node's own
  (prefix-aware routing partitions the reuse), whole when it is a pool; its bandwidth is sized
  against the new-KV writes per node the replay measured (:mod:`kvadvisor.advice.tierfit`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from kvadvisor.advice.space import Shape
from kvadvisor.advice.tierfit import TierFit, fit_tier
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.deploy import host_tier_name, storage_options
from kvadvisor.plan.loader import storage_capability
from kvadvisor.plan.model import StorageCapability, TierPlan
from kvadvisor.units import BYTES_PER_GIB, Unit, format_value
from kvadvisor.vocab import Stage

# SGLang HiCache sizes the host pool at 0.8 of host memory when neither ratio nor size is set.
HOST_KV_FRACTION = 0.8
HOST_TIER = "host"
CAPACITY_TIER = "capacity"
# Storage categories that can hold a capacity tier (host memory is the tier above; object
# storage is too slow to load a prefix within a TTFT target).
CAPACITY_CATEGORIES = ("local_nvme", "ephemeral", "block", "parallel_fs", "kv_store")


def host_tier(shape: Shape, storage: Mapping[str, StorageSpec]) -> TierPlan | None:
    """The instance's host memory as a KV tier (None when the catalog lacks its size)."""
    inst = shape.instance
    if not inst.host_memory_gib:
        return None
    capacity = HOST_KV_FRACTION * inst.host_memory_gib * BYTES_PER_GIB
    link = shape.gpu.pcie_bytes_per_s * inst.gpu_count
    entry = host_tier_name(inst)
    return TierPlan(
        name=HOST_TIER,
        # written inline: its bandwidth is the GPUs' host links, which no storage entry states
        storage=StorageCapability(kind="dram", read_bytes_per_s=link, write_bytes_per_s=link),
        capacity_bytes=capacity,
        category="memory",
        usd_per_hour=0.0,
        price_basis=f"the instance's own memory ({entry}), in its price",
        why=(
            f"{format_value(HOST_KV_FRACTION, Unit.RATIO)} of "
            f"{format_value(inst.host_memory_gib, Unit.GIB)} host memory (SGLang HiCache's "
            f"default host share); loads cross {inst.gpu_count} GPU host links of "
            f"{format_value(shape.gpu.pcie_gbps, Unit.GBPS)}"
        ),
    )


def capacity_options(
    shape: Shape,
    storage: Mapping[str, StorageSpec],
    needed_bytes: float,
    write_p99_bytes_per_s: float,
    instances: int,
) -> tuple[list[TierFit], list[str]]:
    """Capacity-tier options of ``shape``'s instance, sized, best first; and the ones refused.

    Feasible ones first (their p99 write demand fits, their capacity holds what is needed),
    then the lower $/h (unpriced last), then catalog order: never by name.
    """
    fits: list[TierFit] = []
    refused: list[str] = []
    inst = shape.instance
    for opt in storage_options(inst, storage, clients=instances):
        spec = opt.spec
        if spec.category not in CAPACITY_CATEGORIES or spec.announced_only:
            continue
        if spec.shared and spec.result_scope == "per_client":
            refused.append(
                f"{spec.name}: its figures are per client, not for a pool the stage shares"
            )
            continue
        shared = spec.shared
        need_gib = (needed_bytes if shared else needed_bytes / instances) / BYTES_PER_GIB
        fit = fit_tier(
            spec,
            Stage.PREFILL,
            inst,
            write_p99_bytes_per_s,
            None,
            need_gib,
            instances=instances,
        )
        if fit.read_bytes_per_s is None or fit.write_bytes_per_s is None:
            refused.append(
                f"{spec.name}: read or write bandwidth not published, so a tier on it cannot "
                "be sized (measure it and give it with --catalog)"
            )
            continue
        fits.append(fit)

    def key(f: TierFit) -> tuple[bool, float]:
        price = f.cost.usd_per_hour
        return (not f.feasible, math.inf if price is None else price)

    return sorted(fits, key=key), refused


def capacity_pick(fit: TierFit, instances: int) -> TierPlan:
    """A sized option as the plan's capacity tier (its price covers every unit).

    Its capacity is per unit of its scope (one instance, or the pool).
    """
    spec = fit.spec
    shared = spec.shared
    units = 1 if shared else instances
    capacity = None if fit.capacity_gib is None else fit.capacity_gib * BYTES_PER_GIB
    per_device = None if capacity is None else capacity / max(fit.devices, 1)
    what = (
        f"{fit.devices} x {spec.name}"
        + ("" if per_device is None else f" of {format_value(per_device, Unit.BYTES)}")
        + (" shared by the stage" if shared else " per node")
    )
    devices = fit.devices if spec.result_scope in ("per_drive", "per_volume") else 1
    return TierPlan(
        name=CAPACITY_TIER,
        storage=storage_capability(spec, None if capacity is None else capacity / devices),
        capacity_bytes=capacity,
        devices=devices,
        shared=shared,
        spec=spec,
        scope="pooled" if shared else "instance",
        category=spec.category,
        usd_per_hour=None if fit.cost.usd_per_hour is None else fit.cost.usd_per_hour * units,
        price_basis=fit.cost.basis,
        why=f"{what}: {fit.reason}",
        unconfirmed=fit.unconfirmed,
    )
