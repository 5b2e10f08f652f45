"""Checks across the catalogs: every name an instance gives must resolve.

An instance names the storage entry of its own drives (``local_nvme_drive``) and of its host
memory (``host_memory_tier``); a typo there would silently leave the instance without its own
storage, so a name that does not resolve, or resolves to the wrong kind, is a catalog problem.
Its ``gpu`` must name a GPU entry (or alias): the replay and the advisor look it up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.loader import lookup
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.errors import CatalogError, CatalogProblems


def reference_problems(
    storage: Mapping[str, StorageSpec], instances: Mapping[str, InstanceSpec]
) -> list[str]:
    """Every unresolved or mistyped name an instance gives, as "instance.field: why"."""
    out = []
    for inst in instances.values():
        where = f"instances: entries.{inst.name}"
        drive = inst.local_nvme_drive
        if drive is not None:
            spec = storage.get(drive)
            if spec is None:
                out.append(f"{where}.local_nvme_drive: no storage entry named '{drive}'")
            elif spec.category != "local_nvme":
                out.append(
                    f"{where}.local_nvme_drive: '{drive}' is a {spec.category} entry, "
                    "not a drive (category local_nvme)"
                )
            elif inst.cloud and not spec.built_in:
                out.append(
                    f"{where}.local_nvme_drive: '{drive}' is a drive you buy; a cloud "
                    "instance's own NVMe is a built_in entry of its provider"
                )
        elif inst.local_nvme_count and inst.cloud:
            out.append(f"{where}.local_nvme_drive: name the storage entry of its own drives")
        tier = inst.host_memory_tier
        if tier is not None:
            spec = storage.get(tier)
            if spec is None:
                out.append(f"{where}.host_memory_tier: no storage entry named '{tier}'")
            elif spec.category != "memory":
                out.append(f"{where}.host_memory_tier: '{tier}' is not a memory entry")
    return out


def gpu_problems(
    gpus: Mapping[str, Mapping[str, Any]], instances: Mapping[str, InstanceSpec]
) -> list[str]:
    """Every instance whose ``gpu`` names no entry (nor alias) of ``gpus``, as "instance.gpu: why".

    ``gpus``: the GPU catalog's raw entries by name (with their ``aliases``).
    """
    out = []
    for inst in instances.values():
        try:
            lookup(gpus, inst.gpu, "GPU", "gpus")
        except CatalogError as exc:
            out.append(
                f"instances: entries.{inst.name}.gpu: {exc}; or add it in a 'kind: gpus' file "
                "checked and loaded with this one"
            )
    return out


def check_references(
    storage: Mapping[str, StorageSpec], instances: Mapping[str, InstanceSpec]
) -> None:
    """Raise one CatalogProblems listing every unresolved name (nothing when all resolve)."""
    problems = reference_problems(storage, instances)
    if problems:
        raise CatalogProblems("catalogs", problems)
