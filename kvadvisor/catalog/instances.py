"""The GPU instance catalog: GPUs, host memory, own storage, disk caps, networks, price.

An instance is a deployable unit: a cloud instance size or an on-premises server. Its own NVMe
(``local_nvme_*``) names the storage entry that describes one of its drives; its host memory
names the memory entry it is (``host_memory_tier``); its attachable volumes are capped by
``disk_cap_*`` and ``max_data_disks``. :mod:`kvadvisor.deploy` reads these to decide what
storage an instance can have and what bandwidth it reaches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvadvisor.catalog.fabrics import (
    FRONTEND_FABRIC,
    UNSTATED_BACKEND,
    FabricSpec,
    load_fabrics,
)
from kvadvisor.catalog.loader import CatalogChecker, check_entries, find_named, load_layered
from kvadvisor.catalog.storage import DATA_DIR, DEPLOYMENTS, PRICE_FIELDS, Price, parse_price
from kvadvisor.checker import Field

INSTANCES_FILE = DATA_DIR / "instances.yaml"
MEMORY_TYPES = ("DDR4", "DDR5", "LPDDR5X")

INSTANCE_SCHEMA: dict[str, Field] = {
    "as_of": Field("date", required=True, help="when the figures were checked"),
    "provider": Field("str", required=True, choices=DEPLOYMENTS),
    "family": Field("str", required=True),
    "gpu": Field("str", required=True, help="GPU name, e.g. h200, h20, l20"),
    "gpu_count": Field("int", required=True, minimum=1),
    "gpu_memory_gib": Field("number", required=True, help="per GPU"),
    "gpu_bf16_tflops": Field("number", help="dense BF16 per GPU"),
    "gpu_memory_bandwidth_gbps": Field("number", help="HBM/GDDR bandwidth per GPU, GB/s"),
    "vcpus": Field("int", minimum=1),
    "host_cpu": Field("str", help="the host CPU as the provider names it"),
    "host_memory_gib": Field("number"),
    "host_memory_type": Field("str", choices=MEMORY_TYPES, help="DDR4, DDR5 or LPDDR5X"),
    "host_memory_tier": Field("str", help="storage entry describing the host memory tier"),
    "pcie_gen": Field("int", minimum=1, help="generation of the GPUs' host link"),
    "local_nvme_count": Field("int", help="own NVMe drives (or partitions)"),
    "local_nvme_each_gb": Field("number", help="size of one, GB as published"),
    "local_nvme_drive": Field("str", help="storage entry describing one of them"),
    "local_nvme_partitions": Field(
        "bool", help="the units are partitions of shared drives (GCP Local SSD), not drives"
    ),
    "drive_bays": Field("int", help="on-premises: data drive bays for drives you buy"),
    "cxl_slots": Field("int", help="on-premises: CXL memory modules the server takes"),
    "max_data_disks": Field("int", help="block volumes that can be attached"),
    "disk_cap_mbps": Field("number", help="cap on attached block-volume bandwidth, MB/s"),
    "disk_cap_iops": Field("number", help="cap on attached block-volume IOPS"),
    "ephemeral_disks": Field("bool", help="elastic ephemeral disks supported"),
    "frontend_network_gbit": Field("number", help="VPC/Ethernet NIC bandwidth, Gbit/s"),
    "backend_network_gbit": Field("number", help="GPU back-end (RDMA) network, Gbit/s"),
    "backend_network": Field("str", help="what the back-end network is (EFA, InfiniBand)"),
    "backend_fabric": Field(
        "str", help="its kind, a fabric catalog entry (infiniband, roce, efa, tcpx, tcpxo)"
    ),
    "gds_support": Field("bool", help="GPUDirect Storage documented on this instance"),
    "price": Field("mapping", fields=PRICE_FIELDS, help="on-demand price, with source"),
    "scenario": Field("str", help="the vendor's intended use (paraphrased)"),
    "unconfirmed": Field("list[str]"),
}


@dataclass(frozen=True)
class InstanceSpec:
    """One GPU instance size or server (fields as in INSTANCE_SCHEMA)."""

    name: str
    provider: str
    family: str
    gpu: str
    gpu_count: int
    gpu_memory_gib: float
    source: tuple[str, ...]
    source_text: tuple[str, ...]
    as_of: str | None = None
    gpu_bf16_tflops: float | None = None
    gpu_memory_bandwidth_gbps: float | None = None
    vcpus: int | None = None
    host_cpu: str | None = None
    host_memory_gib: float | None = None
    host_memory_type: str | None = None
    host_memory_tier: str | None = None
    pcie_gen: int | None = None
    local_nvme_count: int = 0
    local_nvme_each_gb: float | None = None
    local_nvme_drive: str | None = None
    local_nvme_partitions: bool = False
    drive_bays: int = 0
    cxl_slots: int = 0
    max_data_disks: int | None = None
    disk_cap_mbps: float | None = None
    disk_cap_iops: float | None = None
    ephemeral_disks: bool = False
    frontend_network_gbit: float | None = None
    backend_network_gbit: float | None = None
    backend_network: str | None = None
    backend_fabric: str | None = None
    gds_support: bool | None = None
    price: Price | None = None
    scenario: str = ""
    unconfirmed: tuple[str, ...] = ()
    notes: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def cloud(self) -> bool:
        """A cloud instance (its local storage is fixed) rather than an on-premises server."""
        return self.provider != "onprem"

    @property
    def fabric(self) -> FabricSpec:
        """The network KV moves between instances over: the back end, else the front-end NIC."""
        if not self.backend_network_gbit:
            return load_fabrics()[FRONTEND_FABRIC]
        # A back end whose kind is not given is taken as RDMA, as before fabrics were told apart.
        return load_fabrics()[self.backend_fabric or UNSTATED_BACKEND]

    @property
    def gpu_memory_total_gib(self) -> float:
        """GPU memory of the whole instance."""
        return self.gpu_memory_gib * self.gpu_count

    @property
    def local_nvme_total_gb(self) -> float:
        """Local NVMe capacity of the whole instance (GB as published)."""
        return self.local_nvme_count * (self.local_nvme_each_gb or 0.0)

    @property
    def price_usd_per_hour(self) -> float | None:
        """The on-demand price per hour, None where it is not published or not offered."""
        return None if self.price is None else self.price.usd_per_hour

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
            "host_memory_type": self.host_memory_type,
            "local_nvme_count": self.local_nvme_count,
            "local_nvme_total_gb": self.local_nvme_total_gb,
            "frontend_network_gbit": self.frontend_network_gbit,
            "backend_network_gbit": self.backend_network_gbit,
            "disk_cap_mbps": self.disk_cap_mbps,
            "disk_cap_iops": self.disk_cap_iops,
            "price_usd_per_hour": self.price_usd_per_hour,
        }


def _cross_checks(where: str, e: Mapping[str, Any], problems: CatalogChecker) -> None:
    for field_name in e.get("unconfirmed") or []:
        if field_name not in INSTANCE_SCHEMA:
            problems.add(f"{where}.unconfirmed", f"'{field_name}' is not a field")
    if bool(e.get("local_nvme_count")) != (e.get("local_nvme_each_gb") is not None):
        problems.add(where, "give local_nvme_count and local_nvme_each_gb together")
    fabric = e.get("backend_fabric")
    if fabric is not None and fabric not in load_fabrics():
        problems.add(
            f"{where}.backend_fabric",
            f"'{fabric}' is not a fabric ({', '.join(sorted(load_fabrics()))})",
        )
    for key in ("drive_bays", "cxl_slots"):
        if e.get(key) and e.get("provider") != "onprem":
            problems.add(
                f"{where}.{key}",
                "only on-premises servers take parts you buy; a cloud instance's are fixed",
            )


def parse_instances(
    data: Any, path: str, lines: Mapping[str, int] | None = None
) -> dict[str, InstanceSpec]:
    """Check a parsed instance catalog document (every problem at once) and build its specs."""
    problems = CatalogChecker(path, lines)
    entries = check_entries(path, "instances", data, INSTANCE_SCHEMA, problems)
    out: dict[str, InstanceSpec] = {}
    for name, e in entries.items():
        where = f"entries.{name}"
        _cross_checks(where, e, problems)
        out[name] = InstanceSpec(
            name=name,
            provider=e.get("provider", "onprem"),
            family=e.get("family", ""),
            gpu=e.get("gpu", ""),
            gpu_count=e.get("gpu_count", 1),
            gpu_memory_gib=e.get("gpu_memory_gib", 0.0),
            source=tuple(e.get("source") or ()),
            source_text=tuple(e["source_text"]),
            as_of=e.get("as_of"),
            gpu_bf16_tflops=e.get("gpu_bf16_tflops"),
            gpu_memory_bandwidth_gbps=e.get("gpu_memory_bandwidth_gbps"),
            vcpus=e.get("vcpus"),
            host_cpu=e.get("host_cpu"),
            host_memory_gib=e.get("host_memory_gib"),
            host_memory_type=e.get("host_memory_type"),
            host_memory_tier=e.get("host_memory_tier"),
            pcie_gen=e.get("pcie_gen"),
            local_nvme_count=e.get("local_nvme_count") or 0,
            local_nvme_each_gb=e.get("local_nvme_each_gb"),
            local_nvme_drive=e.get("local_nvme_drive"),
            local_nvme_partitions=bool(e.get("local_nvme_partitions", False)),
            drive_bays=e.get("drive_bays") or 0,
            cxl_slots=e.get("cxl_slots") or 0,
            max_data_disks=e.get("max_data_disks"),
            disk_cap_mbps=e.get("disk_cap_mbps"),
            disk_cap_iops=e.get("disk_cap_iops"),
            ephemeral_disks=bool(e.get("ephemeral_disks", False)),
            frontend_network_gbit=e.get("frontend_network_gbit"),
            backend_network_gbit=e.get("backend_network_gbit"),
            backend_network=e.get("backend_network"),
            backend_fabric=e.get("backend_fabric"),
            gds_support=e.get("gds_support"),
            price=parse_price(f"{where}.price", e.get("price"), problems),
            scenario=e.get("scenario") or "",
            unconfirmed=tuple(e.get("unconfirmed") or ()),
            notes=e.get("notes") or "",
            aliases=tuple(e.get("aliases") or ()),
        )
    problems.raise_if_any()
    return out


def load_instances(extra_files: Iterable[str | Path] = ()) -> dict[str, InstanceSpec]:
    """The packaged instance catalog, with entries from ``extra_files`` added or overriding."""
    return load_layered(parse_instances, INSTANCES_FILE, extra_files)


def find_instance(specs: Mapping[str, InstanceSpec], name: str) -> InstanceSpec:
    """An instance by name or alias; unknown names get the closest ones."""
    return find_named(specs, name, "instance", "instances")
