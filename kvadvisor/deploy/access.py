"""Which storage an instance can have, and through which path (pure: catalog entries in, out).

The rules, each one a fact of how the hardware is sold:

* a cloud instance's local NVMe is fixed: it gets its own drives (``local_nvme_drive``, so many
  of that size), never a drive model bought elsewhere;
* its host memory is the one it has (``host_memory_tier``);
* it gets its provider's block volumes (within ``max_data_disks`` and the disk caps), its
  provider's file systems and pools (over its network), and nothing else;
* an on-premises server takes drives you buy into its bays, and any system you run yourself;
* an option may be limited to some instance families (``families``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB, Unit, format_value

# The host tier of an instance whose memory the catalog does not name.
UNKNOWN_HOST_TIER = "host-dram"


class Via:
    """How an instance reaches a storage option (the words reports use)."""

    HOST = "host memory"
    BUILT_IN = "built-in NVMe"
    BAYS = "drive bays"
    VOLUMES = "block volumes"
    EPHEMERAL = "ephemeral disks"
    FRONTEND = "front-end network"
    BACKEND = "back-end network"


@dataclass(frozen=True)
class Access:
    """Whether an instance can have a storage option, through which path (``via``), how many.

    ``max_devices`` is the count that fits (drives, bays, volumes; 1 for a pool; None where the
    catalog does not say); ``device_gib`` the fixed size of one built-in drive.
    """

    ok: bool
    via: str | None
    reason: str
    max_devices: int | None = None
    device_gib: float | None = None


def deployment(instance: InstanceSpec) -> str:
    """Where an instance runs: its cloud's name, or "onprem"."""
    return instance.provider


def same_deployment(prefill: InstanceSpec, decode: InstanceSpec) -> Access:
    """Whether two stages' instances can serve one model together.

    Disaggregated serving moves each request's KV cache from prefill to decode over one
    network, so both stages run where one provider's (or your own) network joins them.
    """
    a, b = deployment(prefill), deployment(decode)
    if a == b:
        return Access(True, None, f"both stages on {a}")
    return _refuse(
        f"prefill on {prefill.name} ({a}) and decode on {decode.name} ({b}): the KV cache "
        "moves from prefill to decode over one network, which two deployments do not share"
    )


def host_tier_name(instance: InstanceSpec) -> str:
    """The storage entry of an instance's own host memory."""
    return instance.host_memory_tier or UNKNOWN_HOST_TIER


def host_tier(instance: InstanceSpec, storage: Mapping[str, StorageSpec]) -> StorageSpec | None:
    """The host-memory storage entry of ``instance`` (None when the catalog lacks it)."""
    return storage.get(host_tier_name(instance))


def _refuse(reason: str) -> Access:
    return Access(False, None, reason)


def access(instance: InstanceSpec, spec: StorageSpec) -> Access:
    """Whether ``instance`` can have ``spec``, and how (see the module docstring for the rules)."""
    where = deployment(instance)
    if spec.category == "memory":
        mine = host_tier_name(instance)
        if spec.name != mine:
            return _refuse(f"{instance.name}'s host memory is {mine}, not {spec.name}")
        return Access(True, Via.HOST, f"{instance.name}'s own host memory", 1)
    if spec.built_in:
        if spec.name != instance.local_nvme_drive or not instance.local_nvme_count:
            own = instance.local_nvme_drive or "none"
            return _refuse(
                f"{spec.name} comes only with the instances that have it; "
                f"{instance.name}'s own NVMe is {own}"
            )
        unit = "partition" if instance.local_nvme_partitions else "drive"
        each_gib = (instance.local_nvme_each_gb or 0.0) * BYTES_PER_GB / BYTES_PER_GIB
        return Access(
            True,
            Via.BUILT_IN,
            f"{instance.local_nvme_count} built-in {unit}(s) of {format_value(each_gib, Unit.GIB)}",
            instance.local_nvme_count,
            each_gib or None,
        )
    if where not in spec.available_on:
        if spec.category == "local_nvme" and instance.cloud:
            own = (
                f"{instance.local_nvme_count} x {instance.local_nvme_drive}"
                if instance.local_nvme_count
                else "none"
            )
            return _refuse(
                f"{instance.name} is a {instance.provider} instance: its local NVMe is fixed "
                f"({own}); a {spec.name} cannot be fitted"
            )
        return _refuse(
            f"{spec.name} is for {', '.join(spec.available_on)}; {instance.name} is {where}"
        )
    if spec.families and instance.family not in spec.families:
        return _refuse(
            f"{spec.name} is offered on {', '.join(spec.families)} only, not {instance.family}"
        )
    if spec.category == "cxl":
        if not instance.cxl_slots:
            return _refuse(f"{instance.name} lists no CXL memory slots")
        return Access(True, Via.BAYS, f"up to {instance.cxl_slots} CXL modules", instance.cxl_slots)
    if spec.category == "local_nvme":
        if not instance.drive_bays:
            return _refuse(f"{instance.name} has no drive bays for a {spec.name}")
        return Access(
            True, Via.BAYS, f"up to {instance.drive_bays} in its bays", instance.drive_bays
        )
    if spec.category == "ephemeral":
        if not instance.ephemeral_disks:
            return _refuse(f"{instance.name} does not take elastic ephemeral disks")
        return Access(True, Via.EPHEMERAL, "elastic ephemeral disks", instance.max_data_disks)
    if spec.category == "block":
        limit = instance.max_data_disks
        text = f"up to {limit} volumes" if limit else "volumes (count limit not in the catalog)"
        return Access(True, Via.VOLUMES, text, limit)
    # Shared systems are reached over a network: the back-end (RDMA) fabric where the system
    # uses it and the instance has one, else the front-end NIC.
    if spec.client_network == "backend" and instance.backend_network_gbit:
        return Access(True, Via.BACKEND, f"over {instance.backend_network or 'the back end'}", 1)
    return Access(True, Via.FRONTEND, "over the front-end network", 1)


def accessible(
    instance: InstanceSpec, storage: Mapping[str, StorageSpec]
) -> list[tuple[StorageSpec, Access]]:
    """Every storage option ``instance`` can have, in catalog order, with how."""
    out = []
    for spec in storage.values():
        acc = access(instance, spec)
        if acc.ok:
            out.append((spec, acc))
    return out


def refusals(
    instance: InstanceSpec, storage: Mapping[str, StorageSpec]
) -> list[tuple[StorageSpec, str]]:
    """Every storage option ``instance`` cannot have, with why."""
    return [(s, a.reason) for s in storage.values() if not (a := access(instance, s)).ok]
