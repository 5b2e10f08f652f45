"""The storage options an instance can have, each with the bandwidth one node reaches and its cost.

This is the enumeration a deployment search calls: for one instance, every storage option it
can really have (:func:`kvadvisor.deploy.access.access`), at the most devices that fit, with
:class:`~kvadvisor.deploy.reach.Reach` per node and a way to price a chosen size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.deploy.access import Access, access
from kvadvisor.deploy.price import Cost, tier_cost
from kvadvisor.deploy.reach import Reach, reach


@dataclass(frozen=True)
class StorageOption:
    """One storage option of one instance: how it is reached and the most one node gets."""

    instance: InstanceSpec
    spec: StorageSpec
    access: Access
    ceiling: Reach  # with every device that fits (one device where the count is not known)

    @property
    def devices(self) -> int:
        """The devices the ceiling counts (the most that fit, else one)."""
        return self.access.max_devices or 1

    def cost(self, capacity_gib: float | None, devices: int = 1) -> Cost:
        """What ``devices`` holding ``capacity_gib`` in all cost per hour."""
        return tier_cost(self.spec, capacity_gib, devices)


def storage_options(
    instance: InstanceSpec,
    storage: Mapping[str, StorageSpec],
    clients: int = 1,
    include_memory: bool = False,
) -> list[StorageOption]:
    """Every storage option ``instance`` can have, in catalog order, with its per-node ceiling.

    Host memory is left out unless ``include_memory`` (it is the instance's own, not chosen).
    """
    out = []
    for spec in storage.values():
        if spec.category == "memory" and not include_memory:
            continue
        acc = access(instance, spec)
        if not acc.ok:
            continue
        n = acc.max_devices or 1
        size = acc.device_gib
        out.append(StorageOption(instance, spec, acc, reach(instance, spec, n, size, clients)))
    return out
