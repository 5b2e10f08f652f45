"""The GPU instance catalog: GPUs per instance, host memory, local NVMe, network, disk caps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvadvisor.catalog.loader import FieldSpec, check_entries, find_named, load_layered
from kvadvisor.catalog.storage import DATA_DIR, PROVIDERS
from kvadvisor.errors import CatalogError

INSTANCES_FILE = DATA_DIR / "instances.yaml"

INSTANCE_SCHEMA: dict[str, FieldSpec] = {
    "provider": FieldSpec("str", required=True, choices=PROVIDERS),
    "family": FieldSpec("str", required=True),
    "gpu": FieldSpec("str", required=True, help="GPU name, e.g. h200, h20, l20"),
    "gpu_count": FieldSpec("int", required=True, minimum=1),
    "gpu_memory_gib": FieldSpec("number", required=True, help="per GPU"),
    "gpu_bf16_tflops": FieldSpec("number", help="dense BF16 per GPU"),
    "gpu_memory_bandwidth_gbps": FieldSpec("number", help="HBM/GDDR bandwidth per GPU, GB/s"),
    "vcpus": FieldSpec("int", minimum=1),
    "host_memory_gib": FieldSpec("number"),
    "local_nvme_count": FieldSpec("int"),
    "local_nvme_each_gb": FieldSpec("number"),
    "network_gbit": FieldSpec("number", help="Ethernet/RDMA bandwidth, Gbit/s"),
    "disk_cap_mbps": FieldSpec("number", help="cap on attached cloud-disk bandwidth, MB/s"),
    "disk_cap_iops": FieldSpec("number", help="cap on attached cloud-disk IOPS"),
    "ephemeral_disks": FieldSpec("bool", help="elastic ephemeral disks supported"),
    "scenario": FieldSpec("str", help="the vendor's intended use (paraphrased)"),
    "unconfirmed": FieldSpec("list[str]"),
}


@dataclass(frozen=True)
class InstanceSpec:
    """One GPU instance size (fields as in INSTANCE_SCHEMA)."""

    name: str
    provider: str
    family: str
    gpu: str
    gpu_count: int
    gpu_memory_gib: float
    source: tuple[str, ...]
    source_text: tuple[str, ...]
    gpu_bf16_tflops: float | None = None
    gpu_memory_bandwidth_gbps: float | None = None
    vcpus: int | None = None
    host_memory_gib: float | None = None
    local_nvme_count: int = 0
    local_nvme_each_gb: float | None = None
    network_gbit: float | None = None
    disk_cap_mbps: float | None = None
    disk_cap_iops: float | None = None
    ephemeral_disks: bool = False
    scenario: str = ""
    unconfirmed: tuple[str, ...] = ()
    notes: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def gpu_memory_total_gib(self) -> float:
        """GPU memory of the whole instance."""
        return self.gpu_memory_gib * self.gpu_count

    @property
    def local_nvme_total_gb(self) -> float:
        """Local NVMe capacity of the whole instance (GB as published)."""
        return self.local_nvme_count * (self.local_nvme_each_gb or 0.0)

    def as_row(self) -> dict[str, Any]:
        """Flat fields for catalog queries and listings."""
        return {
            "name": self.name,
            "provider": self.provider,
            "family": self.family,
            "gpu": self.gpu,
            "gpu_count": self.gpu_count,
            "gpu_memory_gib": self.gpu_memory_gib,
            "gpu_memory_total_gib": self.gpu_memory_total_gib,
            "gpu_bf16_tflops": self.gpu_bf16_tflops,
            "gpu_memory_bandwidth_gbps": self.gpu_memory_bandwidth_gbps,
            "host_memory_gib": self.host_memory_gib,
            "local_nvme_count": self.local_nvme_count,
            "local_nvme_total_gb": self.local_nvme_total_gb,
            "network_gbit": self.network_gbit,
            "disk_cap_mbps": self.disk_cap_mbps,
            "disk_cap_iops": self.disk_cap_iops,
        }


def parse_instances(data: Any, path: str) -> dict[str, InstanceSpec]:
    """Check a parsed instance catalog document and build its specs."""
    entries = check_entries(path, "instances", data, INSTANCE_SCHEMA)
    out: dict[str, InstanceSpec] = {}
    for name, e in entries.items():
        for field_name in e.get("unconfirmed") or []:
            if field_name not in INSTANCE_SCHEMA:
                raise CatalogError(
                    f"{path}: entries.{name}.unconfirmed: '{field_name}' is not a field"
                )
        if bool(e.get("local_nvme_count")) != (e.get("local_nvme_each_gb") is not None):
            raise CatalogError(
                f"{path}: entries.{name}: give local_nvme_count and local_nvme_each_gb together"
            )
        out[name] = InstanceSpec(
            name=name,
            provider=e["provider"],
            family=e["family"],
            gpu=e["gpu"],
            gpu_count=e["gpu_count"],
            gpu_memory_gib=e["gpu_memory_gib"],
            source=tuple(e["source"]),
            source_text=tuple(e["source_text"]),
            gpu_bf16_tflops=e.get("gpu_bf16_tflops"),
            gpu_memory_bandwidth_gbps=e.get("gpu_memory_bandwidth_gbps"),
            vcpus=e.get("vcpus"),
            host_memory_gib=e.get("host_memory_gib"),
            local_nvme_count=e.get("local_nvme_count") or 0,
            local_nvme_each_gb=e.get("local_nvme_each_gb"),
            network_gbit=e.get("network_gbit"),
            disk_cap_mbps=e.get("disk_cap_mbps"),
            disk_cap_iops=e.get("disk_cap_iops"),
            ephemeral_disks=bool(e.get("ephemeral_disks", False)),
            scenario=e.get("scenario") or "",
            unconfirmed=tuple(e.get("unconfirmed") or ()),
            notes=e.get("notes") or "",
            aliases=tuple(e.get("aliases") or ()),
        )
    return out


def load_instances(extra_files: Iterable[str | Path] = ()) -> dict[str, InstanceSpec]:
    """The packaged instance catalog, with entries from ``extra_files`` added or overriding."""
    return load_layered(parse_instances, INSTANCES_FILE, extra_files)


def find_instance(specs: Mapping[str, InstanceSpec], name: str) -> InstanceSpec:
    """An instance by name or alias; unknown names get the closest ones."""
    return find_named(specs, name, "instance")
